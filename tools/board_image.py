#!/usr/bin/env python3
"""Assemble the test suite's emulated board (tests/emulated_board.py) to boot with
``q25deploy qemu up``: Debian's arm64 cloud kernel and an initramfs with BusyBox, the virtio
modules and dropbear (or OpenSSH), your public key authorized for root.

    python3 tools/board_image.py q25-out/board ~/.ssh/id_ed25519.pub [--flavour openssh]

Needs a Debian host with the arm64 architecture (``dpkg --add-architecture arm64 && apt-get
update``): the packages are fetched with ``apt-get download`` into
``~/.cache/q25deploy/emulated-board`` and unpacked there (nothing is installed). Prints the
``--kernel`` and ``--initrd`` options for ``q25deploy qemu up``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import emulated_board as eb  # noqa: E402


def say(text: str) -> None:
    """What the script does, on stderr (stdout is the options for ``qemu up``)."""
    print(f"board_image: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory for the kernel and the initramfs")
    p.add_argument("public_key", type=Path, help="the OpenSSH public key to authorize for root")
    p.add_argument("--flavour", choices=eb.FLAVOURS, default="dropbear", help="the SSH server (default dropbear)")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        cache = eb.default_cache_dir()
        say(f"fetching and unpacking Debian's arm64 packages into {cache} (cached after the first time)")
        root = eb.fetch_packages(cache)  # both flavours: the same cache as the test suite
        say(f"assembling the initramfs ({a.flavour}, root's key from {a.public_key})")
        spec = eb.InitramfsSpec(a.flavour, a.public_key.read_text())
        initrd = eb.assemble_initramfs(root, a.out / f"initramfs-{a.flavour}.cpio", spec)
        kernel = a.out / "vmlinuz"
        shutil.copyfile(eb.kernel_image(root), kernel)
    except (OSError, eb.BoardError) as e:
        print(f"board_image: {e}", file=sys.stderr)
        return 1
    say(
        f"wrote {kernel} ({kernel.stat().st_size:,} bytes) and {initrd} ({initrd.stat().st_size:,} bytes) "
        f"in {time.monotonic() - t0:.1f} s; boot them with q25deploy qemu up and:"
    )
    print(f"--kernel {kernel} --initrd {initrd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
