"""uboot/q25-regions.cmd: what lands in the script is checked, mkimage compiles it, and real
U-Boot (Debian's qemu_arm64 build, in QEMU) sources it and puts every partition into its region
(read back with U-Boot's crc32), following the install path's `current` symlink on an ext4 disk.
U-Boot relocates itself to the top of DDR: a region planned there is refused, which the board
file must avoid (docs/runtime.md)."""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import threading
import time
import zlib
from pathlib import Path

import pytest
from requirements import need, need_program

from q25deploy.cli import main
from q25deploy.errors import Q25Error
from q25deploy.packer.uboot_script import uboot_script
from q25deploy.resources import data_dir

UBOOT = Path("/usr/lib/u-boot/qemu_arm64/u-boot.bin")
# U-Boot (2023.01, qemu_arm64, -m 4G) relocates to 0x13fef7000 and reserves 0x13ddb2000-0x13fffffff
UBOOT_RESERVATION = """
[[memory.reserved]]
name = "u-boot"                 # U-Boot's relocated code, heap, stack and device tree
base = 0x13c000000
size = 0x4000000
"""


def pmap(**region) -> dict:
    r = {
        "index": 0,
        "node": "q25-region0@13f800000",
        "base": 0x13F800000,
        "size": 0x800000,
        "used": 0x1000,
        "file": "partitions/region_00.bin",
        "sha256": "0" * 64,
        **region,
    }
    return {"target": "qemu", "model": {"sha256": "1" * 64}, "regions": [r]}


def test_names_that_would_break_the_script_are_refused():
    text = uboot_script(pmap(), "/lib/firmware/q25")
    assert 'load ${q25_dev} ${q25_at} ${q25_dir}/region_00.bin && test "${filesize}" = "1000"' in text
    assert "mw.b 0x13f801000 0 0x7ff000" in text and "setenv q25_dir /lib/firmware/q25/current/partitions" in text
    assert "mw.b" not in uboot_script(pmap(used=0x800000), "/lib/firmware/q25")  # a full region: no tail
    for bad in (
        {"file": "partitions/a b.bin"},
        {"file": "partitions/x;reset"},
        {"node": "q25 region@0"},
        {"node": "q25-region0@${x}"},
        {"used": 0x900000},
    ):
        with pytest.raises(Q25Error):
            uboot_script(pmap(**bad), "/lib/firmware/q25")
    for bad in ("/opt/my q25", "/opt/$(reset)", "relative/dir", "/opt/../etc"):
        with pytest.raises(Q25Error):
            uboot_script(pmap(), bad)


def test_mkimage_compiles_the_builds_script(builds, tmp_path):
    mkimage = need_program("mkimage", "Debian: u-boot-tools")
    for target in ("kv260", "zcu104", "qemu"):
        src = builds[target] / "uboot" / "q25-regions.cmd"
        r = subprocess.run(
            [mkimage, "-A", "arm64", "-T", "script", "-C", "none", "-d", str(src), str(tmp_path / f"{target}.scr")],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0 and "Script" in r.stdout, r.stderr
        assert (tmp_path / f"{target}.scr").read_bytes().endswith(src.read_bytes())


class UBootConsole:
    """U-Boot in QEMU on the serial console (stdin/stdout)."""

    def __init__(self, disk: Path) -> None:
        self.p = subprocess.Popen(
            [
                "qemu-system-aarch64",
                "-machine",
                "virt",
                "-cpu",
                "cortex-a53",
                "-m",
                "4G",
                "-smp",
                "1",
                "-display",
                "none",
                "-monitor",
                "none",
                "-serial",
                "stdio",
                "-nic",
                "none",
                "-bios",
                str(UBOOT),
                "-drive",
                f"file={disk},format=raw,if=none,id=hd0",
                "-device",
                "virtio-blk-device,drive=hd0",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.out: queue.Queue[bytes] = queue.Queue()
        self.seen = ""
        threading.Thread(
            target=lambda: [self.out.put(b) for b in iter(lambda: self.p.stdout.read1(4096), b"")], daemon=True
        ).start()

    def expect(self, pattern: str, timeout: float = 60.0, start: int = 0) -> re.Match:
        """Wait until the console output after ``start`` matches ``pattern``."""
        deadline = time.monotonic() + timeout
        while not (m := re.search(pattern, self.seen[start:], re.S)):
            if time.monotonic() > deadline or self.p.poll() is not None:
                raise AssertionError(f"U-Boot never printed {pattern!r}; console:\n{self.seen[-2000:]}")
            try:
                self.seen += self.out.get(timeout=0.2).decode(errors="replace").replace("\r", "")
            except queue.Empty:
                pass
        return m

    def run(self, command: str, timeout: float = 60.0) -> str:
        """Type a command; its output, up to the next prompt."""
        start = len(self.seen)
        self.p.stdin.write(command.encode() + b"\n")
        self.p.stdin.flush()
        return self.expect(re.escape(command) + r"\n(.*?)(?<=\n)=> ", timeout, start).group(1)

    def close(self) -> None:
        self.p.kill()
        self.p.wait()


def boot_disk(build: Path, tmp_path: Path) -> Path:
    """An ext4 root filesystem with the build's partitions in a release behind `current`, as
    deploy leaves them, and the compiled script in /boot."""
    root = tmp_path / "root"
    release = root / "lib/firmware/q25/releases/r1"
    shutil.copytree(build / "partitions", release / "partitions")
    (root / "lib/firmware/q25/current").symlink_to("releases/r1")
    (root / "boot").mkdir()
    subprocess.run(
        [
            "mkimage",
            "-A",
            "arm64",
            "-T",
            "script",
            "-C",
            "none",
            "-d",
            str(build / "uboot" / "q25-regions.cmd"),
            str(root / "boot" / "q25-regions.scr"),
        ],
        check=True,
        capture_output=True,
    )
    disk = tmp_path / "disk.img"
    with open(disk, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(root), str(disk)], check=True, capture_output=True)
    return disk


@pytest.mark.parametrize("reserve_uboot", [True, False], ids=["u-boot-reserved", "qemu-board-file"])
def test_u_boot_loads_every_region(qwen25_tiny, tmp_path, reserve_uboot):
    need_program("mkimage", "Debian: u-boot-tools")
    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    need_program("mkfs.ext4", "Debian: e2fsprogs")
    need(UBOOT.is_file(), "U-Boot for QEMU arm64", "Debian: u-boot-qemu")
    board_file = tmp_path / "qemu.toml"
    board_file.write_text(
        (data_dir("targets") / "qemu.toml").read_text() + (UBOOT_RESERVATION if reserve_uboot else "")
    )
    build = tmp_path / "build"
    assert (
        main(
            [
                "build",
                "--target",
                "qemu",
                "--target-file",
                str(board_file),
                "--model",
                str(qwen25_tiny),
                "--out",
                str(build),
            ]
        )
        == 0
    )
    regions = json.loads((build / "partition_map.json").read_text())["regions"]
    uboot = UBootConsole(boot_disk(build, tmp_path))
    try:
        uboot.expect("Hit any key to stop autoboot")
        uboot.p.stdin.write(b"\n")
        uboot.p.stdin.flush()
        uboot.expect(r"\n=> ")
        # caches on: U-Boot has built its MMU tables (arm64 enable_caches), so DDR, the regions
        # included, is normal cacheable memory here, where load's memcpy and mw.b's memset
        # (DC ZVA) are allowed; booti cleans the data cache to DDR before Linux starts
        # (cleanup_before_linux), and the script itself turns no cache off
        tlb = re.search(r"TLB addr\s*=\s*0x([0-9a-f]+)", uboot.run("bdinfo"))
        assert tlb and int(tlb[1], 16) != 0, "U-Boot runs without MMU tables (caches off)"
        assert not re.search(r"\b(dcache|icache)\b", (build / "uboot" / "q25-regions.cmd").read_text())
        uboot.run("virtio scan")
        uboot.run("setenv q25_dev virtio 0")
        out = uboot.run(
            "load virtio 0 ${scriptaddr} /boot/q25-regions.scr && source ${scriptaddr} && echo ok=${q25_ok}"
        )
        if not reserve_uboot:  # the planned region is where U-Boot lives: refused, reported
            assert "would overwrite reserved memory" in out and "FAILED" in out and "ok=0" in out, out
            return
        assert "ok=1" in out, out
        for r in regions:
            assert f"q25: region {r['node']} loaded" in out
            want = zlib.crc32((build / r["file"]).read_bytes().ljust(r["size"], b"\0"))
            crc = uboot.run(f"crc32 {r['base']:#x} {r['size']:#x}")
            assert crc.strip().endswith(f"==> {want:08x}"), crc
    finally:
        uboot.close()
