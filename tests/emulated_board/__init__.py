"""An emulated Cortex-A53 board: QEMU ``virt`` booting Debian's arm64 kernel with a BusyBox
initramfs and an SSH server (dropbear or OpenSSH), reachable on 127.0.0.1 only.

Built from Debian's arm64 packages without installing anything into the host
(``apt-get download`` + ``dpkg-deb -x`` into a cache directory). The pieces are separate,
pure-ish functions:

- :func:`fetch_packages`  — download and extract the arm64 packages (cached across runs);
- :func:`assemble_initramfs` — a newc cpio (written here, no ``cpio`` tool needed) with
  BusyBox, the virtio modules (insmod'ed by ``/init`` in dependency order), the SSH server,
  its libraries, a fixed host key and an authorized key for every user: root, and users
  who are not root with Debian's real sudo and doas (``users.py``: ``q25`` gains root
  without a password, ``q25pw`` only with one, ``nobody2`` not at all);
- :func:`make_disk` — an ext4 image for the install path (persistence across power cycles);
- :func:`build_guard` / :func:`guard_files` — the /dev/mem guard (``devmem_guard.c``),
  preloaded into every dynamic program through ``/etc/ld.so.preload``: a glibc ``mem*`` call
  on a ``/dev/mem`` mapping aborts the process, as it would fault on Cortex-A53 silicon.

QEMU itself — :func:`make_dtb`, :func:`boot`, :func:`wait_for_ssh`, :meth:`QemuBoard.stop`,
:func:`monitor`, :func:`read_physical` — is the qemu plugin's product code
(``q25deploy_plugins.qemu``, behind ``q25deploy qemu up|down``), re-exported from ``qemu.py``.

Nothing here talks to anything but apt (package downloads) and loopback.
"""

from __future__ import annotations

from .elf import library_closure, module_depends, modules_in_order
from .guard import build_guard, guard_files
from .initramfs import Cpio, InitramfsSpec, assemble_initramfs, host_key_files, known_hosts_line
from .packages import FLAVOURS, BoardError, default_cache_dir, fetch_packages, kernel_image, kernel_release
from .qemu import (
    FAULTING_QEMU,
    Boot,
    Machine,
    QemuBoard,
    boot,
    free_port,
    make_disk,
    make_dtb,
    monitor,
    qemu_version,
    read_physical,
    wait_for_ssh,
)
from .users import DEPLOY_USER, USERS

__all__ = [
    "DEPLOY_USER",
    "FAULTING_QEMU",
    "FLAVOURS",
    "USERS",
    "Boot",
    "BoardError",
    "Cpio",
    "InitramfsSpec",
    "Machine",
    "QemuBoard",
    "assemble_initramfs",
    "boot",
    "build_guard",
    "default_cache_dir",
    "fetch_packages",
    "free_port",
    "guard_files",
    "host_key_files",
    "kernel_image",
    "kernel_release",
    "known_hosts_line",
    "library_closure",
    "make_disk",
    "make_dtb",
    "module_depends",
    "modules_in_order",
    "monitor",
    "qemu_version",
    "read_physical",
    "wait_for_ssh",
]
