"""``q25deploy qemu up|down|status``: the qemu target as a bootable board (a command the qemu
plugin adds through the ``q25deploy_cli_commands`` hook). Parsing needs argparse only; the
handlers import the machinery they use."""

from __future__ import annotations

import argparse
from pathlib import Path

STATE_HELP_DIR = "~/.local/state/q25deploy/qemu/TARGET"  # or under $XDG_STATE_HOME


EPILOG = """\
exit codes:
    0  success (`down` of a board that is not running, too)
    2  bad option; a missing kernel, initrd, drive, deploy directory or build; the SSH port
       in use; a board already running in the state directory
    9  qemu-system-aarch64 or dtc missing, or QEMU refused to start
   11  the board file's [qemu] table is unusable
   13  the board did not answer: QEMU exited during boot, or no SSH banner within --timeout
       (QEMU is left running for a look at its serial log: `q25deploy qemu down`)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="qemu_action", metavar="ACTION", help="what to do with the emulated board")
    sub.required = True
    up = sub.add_parser(
        "up",
        help="boot the emulated board (daemonised) with the build's regions reserved",
        description="Dump QEMU's device tree for the board file's machine, CPU, memory and vCPUs, "
        "strip its random seeds, add the build's reserved-memory.dtsi, compile it with dtc and boot "
        "a kernel with an initramfs or a root disk (or a Yocto qemuarm64 image) in the background, "
        "SSH forwarded from 127.0.0.1 only, QEMU's user network without outside access.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(up, "the board: its [qemu] table, SSH defaults and state directory (default qemu)")
    up.add_argument("--target-file", metavar="FILE", help="your own board file with a [qemu] table")
    up.add_argument(
        "--build",
        metavar="DIR",
        type=Path,
        default=None,
        help="the build whose reserved-memory.dtsi the board boots with (default q25-build/TARGET)",
    )
    up.add_argument("--kernel", metavar="FILE", type=Path, help="the kernel to boot (an arm64 Image or vmlinuz)")
    up.add_argument("--initrd", metavar="FILE", type=Path, help="an initramfs (cpio, optionally compressed)")
    up.add_argument(
        "--drive",
        metavar="FILE",
        type=Path,
        action="append",
        default=[],
        help="a raw disk image as a virtio-blk disk (repeatable; without --initrd the first is the root, /dev/vda)",
    )
    up.add_argument(
        "--append",
        metavar="TEXT",
        default="",
        help="kernel arguments added after console=ttyAMA0 panic=-1 [root=/dev/vda rw]",
    )
    up.add_argument(
        "--yocto-deploy",
        metavar="DIR",
        type=Path,
        help="a Yocto image's deploy directory (tmp/deploy/images/qemuarm64) or .qemuboot.conf: "
        "its kernel, root filesystem and arguments",
    )
    up.add_argument(
        "--virtio",
        choices=["mmio", "pci"],
        default=None,
        help="virtio devices on virtio-mmio or PCI (default mmio; a Yocto image: as its qemuboot.conf)",
    )
    up.add_argument(
        "--ssh-port",
        metavar="N",
        type=int,
        default=None,
        help="forward 127.0.0.1:N to the board's SSH server (default: the board file's ssh.port)",
    )
    up.add_argument(
        "--smp",
        metavar="N",
        type=int,
        default=None,
        help="vCPUs (default: the board file's qemu.smp; fewer are faster on a small host)",
    )
    up.add_argument("--qemu", metavar="PROGRAM", default=None, help="the emulator (default qemu-system-aarch64)")
    up.add_argument("--wait", action="store_true", help="return only once the board's SSH server answers")
    up.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=180.0,
        help="how long --wait waits for the SSH banner (default 180)",
    )
    up.set_defaults(qemu_run="up")
    down = sub.add_parser(
        "down",
        help="stop the emulated board and remove the files `up` wrote",
        description="Stop the QEMU that `up` started from this state directory (the monitor's "
        "quit, then SIGTERM, then SIGKILL; only the process its pidfile names, and only while "
        "that is the QEMU it started) and remove the files `up` wrote there.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(down, "the board whose QEMU to stop: its state directory (default qemu)")
    down.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="how long each way of stopping QEMU gets (default 10)",
    )
    down.set_defaults(qemu_run="down")
    st = sub.add_parser(
        "status",
        help="say whether the emulated board runs and answers SSH",
        description="Say whether the QEMU that `up` started from this state directory still runs, "
        "its pid, SSH port and serial log, and whether its SSH server answers.",
    )
    _common(st, "the board to look at: its state directory (default qemu)")
    st.set_defaults(qemu_run="status")


def _common(p: argparse.ArgumentParser, target_help: str) -> None:
    p.add_argument("--target", metavar="NAME", default="qemu", help=target_help)
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        type=Path,
        default=None,
        help=f"the board's files: pidfile, serial log, monitor, known_hosts (default {STATE_HELP_DIR})",
    )
    p.add_argument("--json", action="store_true", help="the result as JSON")


def run(args: argparse.Namespace, context) -> int:
    from . import commands

    return {"up": commands.up, "down": commands.down, "status": commands.status}[args.qemu_run](args, context)
