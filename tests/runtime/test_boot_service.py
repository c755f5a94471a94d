"""The boot service (recipes/meta-q25/recipes-q25/q25-regions) as root runs it at boot: the
sysvinit script under BusyBox sh in a chroot holding only BusyBox, a static q25tok at
/usr/bin/q25tok, a running device tree at /sys/firmware/devicetree/base and a file standing
in for /dev/mem. On the emulated board: tests/deploy/emulated/test_board_regions.py."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from requirements import need_program
from shared_builds import runtime
from sparse_files import written

from q25deploy.resources import runtime_sources

SERVICE = runtime_sources().parent.parent / "q25-regions" / "files"
NODE, BASE, SIZE = "q25-region0@100000", 0x100000, 0x10000
DATA = bytes((i * 13 + 5) & 0xFF for i in range(5000))


@pytest.fixture(scope="module")
def static_q25tok(tmp_path_factory) -> Path:
    need_program("cc", "Debian: gcc")
    return runtime(tmp_path_factory, static=True) / "q25tok"


def chroot_board(root: Path, q25tok: Path) -> Path:
    """A board's root: BusyBox, the image's q25tok, the boot script, a device tree reserving one
    region and its memory, and a current release whose table names that region."""
    busybox = need_program("busybox", "Debian: busybox-static")
    (root / "bin").mkdir(parents=True)
    shutil.copy2(busybox, root / "bin" / "busybox")
    subprocess.run([str(root / "bin" / "busybox"), "--install", "-s", str(root / "bin")], check=True)
    for link in (root / "bin").iterdir():  # the applets' links point into the chroot's /bin
        if link.is_symlink():
            link.unlink()
            link.symlink_to("/bin/busybox")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "sbin").mkdir(parents=True)
    shutil.copy2(q25tok, root / "usr" / "bin" / "q25tok")
    shutil.copy2(SERVICE / "q25-regions", root / "usr" / "sbin" / "q25-regions")
    node = root / "sys" / "firmware" / "devicetree" / "base" / "reserved-memory" / NODE
    node.mkdir(parents=True)
    (node / "reg").write_bytes(BASE.to_bytes(8, "big") + SIZE.to_bytes(8, "big"))
    (node / "no-map").write_bytes(b"")
    (root / "dev").mkdir()
    with open(root / "dev" / "mem", "wb") as f:
        f.truncate(BASE + SIZE)
    release = root / "lib" / "firmware" / "q25" / "releases" / "0123456789abcdef"
    (release / "partitions").mkdir(parents=True)
    (release / "partitions" / "region_00.bin").write_bytes(DATA)
    (release / "partitions" / "regions.tab").write_text(
        f"{NODE} {BASE:#x} {SIZE:#x} region_00.bin {len(DATA)} {hashlib.sha256(DATA).hexdigest()}\n"
    )
    (root / "lib" / "firmware" / "q25" / "current").symlink_to("releases/0123456789abcdef")
    return release


def boot(root: Path) -> subprocess.CompletedProcess:
    """`q25-regions start` as root in the chroot (a user namespace's root when not root)."""
    chroot = ["chroot"] if os.geteuid() == 0 else [need_program("unshare", "util-linux"), "-r", "chroot"]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    p = subprocess.Popen(
        [*chroot, str(root), "/bin/sh", "/usr/sbin/q25-regions", "start"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hang is ended whole: the script, q25tok and sed
    )
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def resident(root: Path) -> bool:
    ddr = (root / "dev" / "mem").read_bytes()[BASE : BASE + SIZE]
    return ddr == DATA + bytes(SIZE - len(DATA))


def test_boot_loads_with_the_images_q25tok_never_the_install_dirs(tmp_path, static_q25tok):
    """Issue 33 (2): the boot service ran $Q25_DIR/current/q25tok as root at every boot, a file
    whoever can write the install dir (uid 1000 here) controls. It runs /usr/bin/q25tok only."""
    need_program("chroot", "coreutils")
    root = tmp_path / "root"
    release = chroot_board(root, static_q25tok)
    planted = release / "q25tok"
    planted.write_text('#!/bin/sh\necho pwned > /pwned\nexec /usr/bin/q25tok "$@"\n')
    planted.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(planted, 1000, 1000)
    r = boot(root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (root / "pwned").exists(), "the boot service ran the install dir's q25tok"
    assert f"q25-regions: region {NODE} " in r.stdout and r.stdout.endswith(" loaded\n"), r.stdout
    assert resident(root)


def test_a_fifo_as_a_partition_does_not_hang_the_boot(tmp_path, static_q25tok):
    """Issue 33 (5): a FIFO at current/partitions/region_00.bin held `q25tok load` in open(2)
    and the boot with it (a oneshot before sysinit.target, no start timeout). Now refused at
    once, nothing written; and the unit has a start timeout besides."""
    need_program("chroot", "coreutils")
    root = tmp_path / "root"
    release = chroot_board(root, static_q25tok)
    (release / "partitions" / "region_00.bin").unlink()
    os.mkfifo(release / "partitions" / "region_00.bin")
    r = boot(root)  # boot()'s timeout: a hang fails the test
    assert "region_00.bin: not a regular file" in r.stdout, r.stdout + r.stderr
    assert not written(root / "dev" / "mem")
    unit = (SERVICE / "q25-regions.service").read_text().splitlines()
    assert any(ln.startswith("TimeoutStartSec=") and 0 < int(ln.split("=")[1]) <= 600 for ln in unit)
