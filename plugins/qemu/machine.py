"""The emulated machine: QEMU's command line for a board file's ``[qemu]`` table and a boot
(pure), and the board's device tree — QEMU's own for the same machine/cpu/memory/smp, its
random seeds removed so the same inputs give the same bytes, plus the build's
``reserved-memory.dtsi`` — compiled with ``dtc``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from q25deploy.errors import BoardFileError, ToolError, UsageError

QEMU = "qemu-system-aarch64"
TOOL_PACKAGES = {QEMU: "Debian: qemu-system-arm", "dtc": "Debian: device-tree-compiler"}
SEED_PROPERTIES = ("rng-seed", "kaslr-seed")  # /chosen: random on every dump (hw/arm/virt.c)
VIRTIO_BUSES = ("mmio", "pci")
CONSOLE = "console=ttyAMA0"  # the virt machine's PL011 UART, written to the serial log
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
_MEMORY = re.compile(r"[1-9][0-9]*[KMGT]?\Z")


@dataclass(frozen=True)
class Machine:
    """QEMU's machine, CPU, memory and vCPUs (a board file's ``[qemu]`` table)."""

    machine: str = "virt"
    cpu: str = "cortex-a53"
    memory: str = "4G"
    smp: int = 2
    qemu: str = QEMU

    @classmethod
    def from_board(cls, board, smp: int | None = None, qemu: str | None = None) -> Machine:
        """From ``board.qemu`` (``q25deploy.board.boardfile.Board``); ``smp`` overrides its vCPUs
        (TCG on a small host), ``qemu`` the emulator program."""
        q = dict(board.qemu or {})
        where = board.source or board.name
        m = cls(
            str(q.get("machine", "virt")),
            str(q.get("cpu", "cortex-a53")),
            str(q.get("memory", "4G")),
            int(smp or q.get("smp", 2)),
            qemu or QEMU,
        )
        for key, value, pattern in (
            ("machine", m.machine, _NAME),
            ("cpu", m.cpu, _NAME),
            ("memory", m.memory, _MEMORY),
        ):
            if not pattern.match(value):
                raise BoardFileError(f"{where}: qemu.{key}: {value!r} is not a QEMU {key} name")
        if not 1 <= m.smp <= 64:
            raise BoardFileError(f"{where}: qemu.smp: {m.smp} is not 1 to 64")
        return m

    def args(self) -> list[str]:
        """The options every run of this machine shares (a device-tree dump and a boot)."""
        return ["-cpu", self.cpu, "-m", self.memory, "-smp", str(self.smp), "-nodefaults", "-display", "none"]


@dataclass(frozen=True)
class Boot:
    """What to boot and how the board is reached. Paths are absolute (QEMU's ``-daemonize``
    changes to ``/``)."""

    kernel: Path
    initrd: Path | None = None
    drives: tuple[Path, ...] = ()  # virtio-blk disks (raw images), /dev/vda first
    dtb: Path | None = None
    cmdline: str = f"{CONSOLE} panic=-1"
    port: int = 2222  # 127.0.0.1:port is forwarded to the guest's port 22
    virtio: str = "mmio"  # virtio-*-device (virtio-mmio) or virtio-*-pci
    restrict: bool = True  # the guest reaches nothing outside (QEMU's user network, restrict=on)


@dataclass(frozen=True)
class Files:
    """Where a running QEMU keeps its pidfile, serial log and monitor socket."""

    pidfile: Path
    serial_log: Path
    monitor: Path

    @classmethod
    def in_dir(cls, state_dir: Path) -> Files:
        d = Path(os.path.abspath(state_dir))
        return cls(d / "qemu.pid", d / "serial.log", d / "monitor.sock")


def kernel_cmdline(*, initrd: bool, drives: int, extra: str = "", root: str = "/dev/vda") -> str:
    """The kernel command line: the serial console, ``panic=-1`` (with QEMU's ``-no-reboot`` a
    panic ends QEMU instead of looping), ``root=`` when a disk and no initramfs is the root,
    then ``extra``."""
    parts = [CONSOLE, "panic=-1"]
    if drives and not initrd and "root=" not in extra:
        parts.append(f"root={root}" + ("" if {"ro", "rw"} & set(root.split()) else " rw"))
    parts += extra.split()
    return " ".join(parts)


def _option_value(value: str) -> str:
    """A value inside a QEMU ``key=value,...`` option (a comma is written twice)."""
    return value.replace(",", ",,")


def qemu_argv(machine: Machine, boot: Boot, files: Files) -> list[str]:
    """QEMU's argv for a daemonised boot: user network with SSH forwarded from
    127.0.0.1:``port`` only, virtio net/rng/blk, serial log, HMP monitor socket, pidfile."""
    if boot.virtio not in VIRTIO_BUSES:
        raise UsageError(f"virtio bus {boot.virtio!r} is not one of {', '.join(VIRTIO_BUSES)}")
    if not 1 <= boot.port <= 65535:
        raise UsageError(f"SSH port {boot.port} is not 1 to 65535")
    for f in (files.pidfile, files.serial_log, files.monitor):
        if "," in str(f) or not f.is_absolute():
            raise UsageError(f"{f}: QEMU cannot take this path (give an absolute state directory without ',')")
    bus = "device" if boot.virtio == "mmio" else "pci"
    rom = ",romfile=" if bus == "pci" else ""  # no PXE option ROM: the kernel is loaded directly
    net = f"user,id=n0{',restrict=on' if boot.restrict else ''},hostfwd=tcp:127.0.0.1:{boot.port}-:22"
    argv = [
        machine.qemu,
        "-machine",
        machine.machine,
        *machine.args(),
        "-no-reboot",
        "-kernel",
        str(boot.kernel),
        "-append",
        boot.cmdline,
        "-netdev",
        net,
        "-device",
        f"virtio-net-{bus},netdev=n0{rom}",
        "-device",
        f"virtio-rng-{bus}",
        "-serial",
        f"file:{files.serial_log}",
        "-monitor",
        f"unix:{files.monitor},server=on,wait=off",
        "-daemonize",
        "-pidfile",
        str(files.pidfile),
    ]
    if boot.initrd is not None:
        argv += ["-initrd", str(boot.initrd)]
    if boot.dtb is not None:
        argv += ["-dtb", str(boot.dtb)]
    for i, disk in enumerate(boot.drives):
        argv += [
            "-drive",
            f"file={_option_value(str(disk))},format=raw,if=none,id=hd{i}",
            "-device",
            f"virtio-blk-{bus},drive=hd{i}",
        ]
    return argv


def strip_seeds(dts: str) -> str:
    """``dts`` (dtc's output) without the random ``rng-seed``/``kaslr-seed`` properties."""
    keep = [ln for ln in dts.splitlines() if not re.match(rf"\s*({'|'.join(SEED_PROPERTIES)})\s*(=|;)", ln)]
    return "\n".join(keep) + "\n"


def need_tool(program: str) -> str:
    """The path of a system tool, or a :class:`ToolError` that says which package has it."""
    path = shutil.which(program)
    if path is None:
        raise ToolError(f"{program} not found ({TOOL_PACKAGES.get(os.path.basename(program), 'install it')})")
    return path


def run_tool(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """Run a system tool; a missing tool or a failure is a one-line :class:`ToolError`."""
    need_tool(cmd[0])
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if r.returncode != 0:
        detail = " ".join((r.stderr or r.stdout).split())[-400:]
        raise ToolError(f"{what} failed ({os.path.basename(cmd[0])} exit {r.returncode}): {detail}")
    return r


def dtb_files(out: Path) -> list[Path]:
    """Every file :func:`make_dtb` writes for ``out`` (QEMU's dump, the fragment's copy, the
    source, the DTB)."""
    out = Path(os.path.abspath(out))
    return [
        out.with_name(out.stem + ".qemu.dtb"),
        out.with_name(out.stem + ".reserved-memory.dtsi"),
        out.with_suffix(".dts"),
        out,
    ]


def make_dtb(out: Path, machine: Machine, dtsi: Path | None = None) -> Path:
    """Write the board's device tree ``out``: QEMU's for ``machine`` (``-machine
    ...,dumpdtb=``) without its random seeds, plus ``/include/`` of a copy of ``dtsi`` beside
    it; compiled by dtc. The same inputs give the same bytes."""
    raw, copy, src, out = dtb_files(out)
    if not re.match(r"[\w.+-]+\Z", copy.name):
        raise UsageError(f"{out.name}: give the device tree a plain file name (letters, digits, '.', '+', '-', '_')")
    out.parent.mkdir(parents=True, exist_ok=True)
    run_tool(
        [machine.qemu, "-machine", f"{machine.machine},dumpdtb={_option_value(str(raw))}", *machine.args()],
        f"dump QEMU's device tree ({machine.machine}, {machine.cpu}, {machine.memory}, {machine.smp} CPUs)",
    )
    dts = strip_seeds(
        run_tool(["dtc", "-q", "-I", "dtb", "-O", "dts", str(raw)], "decompile QEMU's device tree").stdout
    )
    if dtsi is not None:
        _write(copy, Path(dtsi).read_bytes())
        dts += f'/include/ "{copy.name}"\n'  # a plain file name beside the .dts: nothing to escape
    _write(src, dts.encode())
    tmp = out.with_name(out.name + ".tmp")
    run_tool(["dtc", "-q", "-I", "dts", "-O", "dtb", "-o", str(tmp), str(src)], "compile the board's device tree")
    tmp.replace(out)
    return out


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
