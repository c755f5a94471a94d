"""Booting the emulated board. QEMU itself — the device tree (:func:`make_dtb`, QEMU's own
plus a build's reserved-memory.dtsi), :func:`boot`, :func:`wait_for_ssh`,
:meth:`QemuBoard.stop`, :func:`monitor`, :func:`read_physical` — is the qemu plugin's product
code (``q25deploy_plugins.qemu``, behind ``q25deploy qemu up|down``), re-exported here; the
test board adds only its ext4 disk."""

from __future__ import annotations

from pathlib import Path

from q25deploy_plugins.qemu.machine import Boot, Machine, make_dtb
from q25deploy_plugins.qemu.vm import QemuBoard, boot, free_port, monitor, read_physical, wait_for_ssh

from .packages import run_tool

__all__ = ["Boot", "Machine", "QemuBoard", "boot", "free_port", "make_disk", "make_dtb", "monitor", "read_physical",
           "wait_for_ssh"]


def make_disk(path: Path, size_mib: int = 64) -> Path:
    """An empty ext4 image for the install path (persistence across reboots)."""
    with open(path, "wb") as f:
        f.truncate(size_mib << 20)
    run_tool(["mkfs.ext4", "-q", "-F", "-L", "q25", str(path)], "make the board's ext4 disk (e2fsprogs)")
    return path
