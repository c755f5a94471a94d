"""Booting the emulated board. QEMU itself — the device tree (:func:`make_dtb`, QEMU's own
plus a build's reserved-memory.dtsi), :func:`boot`, :func:`wait_for_ssh`,
:meth:`QemuBoard.stop`, :func:`monitor`, :func:`read_physical` — is the qemu plugin's product
code (``q25deploy_plugins.qemu``, behind ``q25deploy qemu up|down``), re-exported here; the
test board adds only its ext4 disk."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from q25deploy_plugins.qemu.machine import Boot, Machine, make_dtb
from q25deploy_plugins.qemu.vm import QemuBoard, boot, free_port, monitor, read_physical, wait_for_ssh

from .packages import run_tool

__all__ = [
    "FAULTING_QEMU",
    "Boot",
    "Machine",
    "QemuBoard",
    "boot",
    "free_port",
    "make_disk",
    "make_dtb",
    "monitor",
    "qemu_version",
    "read_physical",
    "wait_for_ssh",
]

# the first QEMU measured to fault an unaligned access to Device memory, as Cortex-A53 does
# (7.2 forgives it; /work/shared/reference/silicon.md): the board tests need at least this one
FAULTING_QEMU = (10, 0)


def qemu_version(program: str = "qemu-system-aarch64") -> tuple[int, int, int]:
    """``program --version``'s (major, minor, micro)."""
    out = subprocess.run([program, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"version (\d+)\.(\d+)\.(\d+)", out)
    if not m:
        raise ValueError(f"{program} --version: no version in {out[:80]!r}")
    return int(m[1]), int(m[2]), int(m[3])


def make_disk(path: Path, size_mib: int = 64) -> Path:
    """An empty ext4 image for the install path (persistence across reboots)."""
    with open(path, "wb") as f:
        f.truncate(size_mib << 20)
    run_tool(["mkfs.ext4", "-q", "-F", "-L", "q25", str(path)], "make the board's ext4 disk (e2fsprogs)")
    return path
