"""Helpers of the OTA tests: packaging through the CLI, running the real tools, reading cpio,
and the board side (q25-ota.sh under BusyBox sh with only BusyBox applets on PATH, against a
directory standing in for the board's root, as the update engines call it)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from q25deploy.cli import main
from q25deploy.ota.mender import read_members
from q25deploy.ota.scripts import SCRIPT


def package(build: Path, fmt: str, out: Path, *extra: str, target: str = "qemu") -> Path:
    assert main(["package", "--target", target, "--build", str(build), "--format", fmt, "--out", str(out), *extra]) == 0
    return out


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)


def cpio_members(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (offset of the data, size) in a cpio newc archive."""
    out, pos = {}, 0
    while True:
        assert data[pos : pos + 6] == b"070701", f"bad cpio magic at {pos}"
        fields = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        size, namesize = fields[6], fields[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        start = pos + 110 + namesize
        start += -start % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (start, size)
        pos = start + size
        pos += -pos % 4


def swupdate_check(swu: Path, cert: Path, tmp: Path, hw: str = "qemu:1.0") -> str:
    """``swupdate -c`` (check mode) on ``swu``: its messages (exit status is not telling)."""
    work = tmp / "swupdate-tmp"
    work.mkdir(exist_ok=True)
    r = run(
        ["swupdate", "-v", "-c", "-i", str(swu), "-k", str(cert), "-H", hw],
        env={**os.environ, "TMPDIR": str(work)},
        cwd=work,
    )
    return r.stdout + r.stderr


INSTALL = "lib/firmware/q25"


def make_board(root: Path, q25tok: Path) -> Path:
    (root / "usr" / "bin").mkdir(parents=True)
    shutil.copy2(q25tok, root / "usr" / "bin" / "q25tok")
    return root


def sh(busybox_path: str, root: Path, *args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    env = {"PATH": busybox_path, "Q25_ROOT": str(root)}
    return subprocess.run(
        [f"{busybox_path}/sh", str(script), *args], env=env, capture_output=True, text=True, timeout=120
    )


def mender_tree(art: Path, tree: Path) -> Path:
    """The update module's file tree as the Mender client lays it out (files/ from data/0000)."""
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "files").mkdir(parents=True)
    (tree / "tmp").mkdir()
    members = read_members(art)
    with tarfile.open(fileobj=io.BytesIO(members["data/0000.tar.gz"]), mode="r:gz") as t:
        t.extractall(tree / "files", filter="data")
    return tree


def mender_install(bb: str, root: Path, art: Path, tree: Path) -> list[subprocess.CompletedProcess]:
    """Download → ArtifactInstall → ArtifactCommit (→ ArtifactRollback on failure) → Cleanup."""
    mender_tree(art, tree)
    runs = [sh(bb, root, "SupportsRollback", str(tree)), sh(bb, root, "Download", str(tree))]
    for state in ("ArtifactInstall", "NeedsArtifactReboot", "ArtifactCommit"):
        runs.append(sh(bb, root, state, str(tree)))
        if runs[-1].returncode != 0:
            runs.append(sh(bb, root, "ArtifactRollback", str(tree)))
            break
    runs.append(sh(bb, root, "Cleanup", str(tree)))
    assert runs[0].stdout.strip() == "Yes"
    return runs


def swupdate_install(bb: str, root: Path, swu: Path) -> subprocess.CompletedProcess:
    """What SWUpdate does with the .swu: the script with preinst (its failure ends the update),
    each `files` entry to its path, then the script with postinst."""
    data = swu.read_bytes()
    members = cpio_members(data)
    off, size = members["sw-description"]
    desc = data[off : off + size].decode()
    o, n = members["q25-ota.sh"]
    script = root.parent / f"{root.name}-q25-ota.sh"
    script.write_bytes(data[o : o + n])
    pre = sh(bb, root, "preinst", script=script)
    if pre.returncode != 0:
        return pre
    for name, path in re.findall(r'filename = "([^"]+)";\s*path = "([^"]+)";', desc):
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        o, n = members[name]
        dest.write_bytes(data[o : o + n])
    return sh(bb, root, "postinst", script=script)


def layout(root: Path) -> dict:
    """Everything under the install dir: files with their bytes, links, the state without times."""
    base = root / INSTALL
    out = {}
    for p in sorted(base.rglob("*")):
        rel = p.relative_to(base).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir",)
        elif rel == ".q25deploy-state.json":
            state = json.loads(p.read_text())
            for r in state["releases"].values():
                r.pop("deployed_at")
            out[rel] = ("state", state)
        else:
            out[rel] = ("file", p.read_bytes())
    return out
