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

from sparse_files import read_at, zero_between

from q25deploy.cli import main
from q25deploy.ota.mender import payload_tar, read_members
from q25deploy.resources import OTA_SCRIPT as SCRIPT


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
    """``swupdate -c`` (check mode) on ``swu``: its messages (exit status is not telling). It
    runs in a network namespace of its own: swupdate binds the abstract socket @NotifyServer
    (one per network namespace), and two at once, from tests on two workers, can hang."""
    work = tmp / "swupdate-tmp"
    work.mkdir(exist_ok=True)
    own_net = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--net"]
    r = run(
        [*own_net, "swupdate", "-v", "-c", "-i", str(swu), "-k", str(cert), "-H", hw],
        env={**os.environ, "TMPDIR": str(work)},
        cwd=work,
    )
    return r.stdout + r.stderr


INSTALL = "lib/firmware/q25"


def make_board(root: Path, q25tok: Path, *reserving: Path) -> Path:
    """A board's root: q25tok in /usr/bin, and a running device tree (``proc/device-tree``) that
    reserves the regions of the builds ``reserving`` over a sparse file standing in for physical
    memory (``dev/mem``: the script prefixes both with Q25_ROOT)."""
    (root / "usr" / "bin").mkdir(parents=True)
    shutil.copy2(q25tok, root / "usr" / "bin" / "q25tok")
    stand_in(root / "proc" / "device-tree", root / "dev" / "mem", reserving)
    return root


def stand_in(device_tree: Path, memory: Path, reserving) -> None:
    """A running device tree reserving the regions of the builds ``reserving``, and a sparse
    file covering them that stands in for physical memory."""
    regions = [r for build in reserving for r in json.loads((build / "partition_map.json").read_text())["regions"]]
    device_tree.mkdir(parents=True)
    reserve(device_tree, regions)
    memory.parent.mkdir(parents=True, exist_ok=True)
    with open(memory, "wb") as f:
        f.truncate(max((r["base"] + r["size"] for r in regions), default=0))


def reserve(device_tree: Path, regions: list[dict], no_map: bool = True) -> None:
    """``device_tree/reserved-memory/<node>/reg`` (two address and two size cells) and ``no-map``
    for each region, as Linux shows a running device tree."""
    for r in regions:
        node = device_tree / "reserved-memory" / r["node"]
        node.mkdir(parents=True, exist_ok=True)
        (node / "reg").write_bytes(r["base"].to_bytes(8, "big") + r["size"].to_bytes(8, "big"))
        if no_map:
            (node / "no-map").write_bytes(b"")


def resident(mem: Path, build: Path) -> bool:
    """Every region of ``build`` in the memory file holds its partition, zeros after it."""
    for r in json.loads((build / "partition_map.json").read_text())["regions"]:
        part = (build / r["file"]).read_bytes()
        if read_at(mem, r["base"], len(part)) != part or not zero_between(
            mem, r["base"] + len(part), r["base"] + r["size"]
        ):
            return False
    return True


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
    with tarfile.open(fileobj=io.BytesIO(payload_tar(members)), mode="r:") as t:
        t.extractall(tree / "files", filter="data")
    return tree


def mender_install(bb: str, root: Path, art: Path, tree: Path, edit=None) -> list[subprocess.CompletedProcess]:
    """Download → ArtifactInstall → ArtifactCommit (→ ArtifactRollback on failure) → Cleanup;
    ``edit(tree)`` changes the payload's file tree first (a crafted artifact)."""
    mender_tree(art, tree)
    if edit:
        edit(tree)
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
    """Everything under the install dir: files with their bytes, links, the state without times
    and without the forward passes a deploy records (deploy/state/forward_known.py: the OTA commit runs
    its pass every time and records none)."""
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
                r.pop("forward", None)
            out[rel] = ("state", state)
        else:
            out[rel] = ("file", p.read_bytes())
    return out
