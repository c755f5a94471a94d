"""What the deploy tests share: running a deploy command against a test sshd, a board-side
fault-injection wrapper, and a fingerprint of a directory tree."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from sshd import SSHServer, board_command

from q25deploy.cli import main

INSTALL = Path("lib") / "firmware" / "q25"


def board_argv(action: str, ssh, server, root: Path, *extra: str, known_hosts: Path | None = None) -> list[str]:
    """``q25deploy ACTION`` against a loopback board (its sshd, the test key, known hosts
    checked, the board's files under ``root``), then ``extra``."""
    kh = known_hosts or server.known_hosts(root.parent / f"known_hosts_{server.port}")
    return board_command(action, server.port, ssh["key"], kh, root, *extra)


def deploy(capsys, ssh, server, root, build, *extra, known_hosts=None, runtime=None, action="deploy", unreserved=True):
    """``unreserved``: a deploy passes --allow-unreserved, as these boards (the test host under
    sshd) have no device tree that reserves the build's regions, unless a test gives one."""
    argv = board_argv(action, ssh, server, root, "--build", str(build), "--json", *extra, known_hosts=known_hosts)
    if unreserved and action == "deploy":
        argv.append("--allow-unreserved")
    if runtime and action in ("deploy",):
        argv += ["--runtime-bin", str(runtime)]
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def release_bytes(build: Path, runtime: Path) -> int:
    manifest = {a["path"]: a["size"] for a in json.loads((build / "manifest.json").read_text())["artifacts"]}
    files = ["tokenizer/tokenizer.q25tokrt", "tokenizer/tokenizer_runtime_image_manifest.json", "partition_map.json"]
    files += [f for f in ("model_hparams.txt", "forward_record.json") if f in manifest]  # the forward pass's
    return (
        sum(manifest[f] for f in files)
        + sum(v for k, v in manifest.items() if k.startswith("partitions/"))
        + runtime.stat().st_size
    )


def wrapped_board(tmp_path: Path, ssh, name: str, scripts: dict[str, str]) -> SSHServer:
    """An sshd whose PATH puts ``scripts`` (program name -> sh script) before the system's."""
    wrappers = tmp_path / f"bin-{name}"
    wrappers.mkdir()
    for prog, body in scripts.items():
        (wrappers / prog).write_text("#!/bin/sh\n" + body)
        (wrappers / prog).chmod(0o755)
    return SSHServer(tmp_path / name, ssh["key"], env_path=f"{wrappers}:/usr/bin:/bin")


def older_q25tok(tmp_path: Path, q25tok: Path) -> Path:
    """A q25tok from before ``receive``: every other command is the real one's."""
    src, exe = tmp_path / "older.c", tmp_path / "older" / "q25tok"
    exe.parent.mkdir()
    src.write_text(
        "#include <string.h>\n#include <unistd.h>\nint main(int c, char **v) {\n"
        '  if (c > 1 && !strcmp(v[1], "receive")) return 2;\n'
        f'  execv("{q25tok}", v); return 127; }}\n'
    )
    subprocess.run(["cc", str(src), "-o", str(exe)], check=True)
    return exe


def tree(top: Path, skip: Path | None = None) -> dict[str, str]:
    """Every path under ``top`` (not following symlinks) with its type and content digest."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            if skip is not None and (p == skip or skip in p.parents):
                continue
            rel = str(p.relative_to(top))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
