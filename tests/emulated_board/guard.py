"""The emulated board's /dev/mem guard (``devmem_guard.c``): built for aarch64 here and put
into every board's initramfs with ``/etc/ld.so.preload``, so every dynamic program (q25tok
over SSH, and the boot services at boot) aborts on a glibc ``mem*`` call on a ``/dev/mem``
mapping, where Cortex-A53 silicon would fault and QEMU 10 may not."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .packages import BoardError

SOURCE = Path(__file__).with_name("devmem_guard.c")
LIBRARY = "lib/q25-devmem-guard.so"  # in the initramfs
MESSAGE = "q25-devmem-guard: "  # how its refusals start (stderr)
CC = "aarch64-linux-gnu-gcc"


def build_guard(out: Path) -> Path:
    """The guard as an aarch64 shared library (glibc-dynamic, libc only)."""
    cmd = [
        CC,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fno-builtin",
        "-fno-tree-loop-distribute-patterns",
        "-o",
        str(out),
        str(SOURCE),
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise BoardError(f"{CC} not found (Debian: gcc-aarch64-linux-gnu)") from None
    if r.returncode != 0:
        raise BoardError(f"building the /dev/mem guard failed: {r.stderr.strip()[-300:]}")
    return out


def guard_files(library: Path) -> dict[str, bytes]:
    """The initramfs entries that preload the guard into every dynamic program."""
    return {LIBRARY: library.read_bytes(), "etc/ld.so.preload": f"/{LIBRARY}\n".encode()}
