"""Booting the emulated board: QEMU's own device tree plus a build's reserved-memory.dtsi,
daemonised QEMU with a pidfile, a serial log and a monitor socket, SSH forwarded from
127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .packages import BoardError, run_tool

# -- device tree --------------------------------------------------------------------------

@dataclass(frozen=True)
class Machine:
    machine: str = "virt"
    cpu: str = "cortex-a53"
    memory: str = "4G"
    smp: int = 2
    qemu: str = "qemu-system-aarch64"

    @classmethod
    def from_board(cls, board, smp: int | None = None) -> "Machine":
        """From a board file's ``[qemu]`` table (``q25deploy.board.boardfile.Board.qemu``)."""
        q = dict(board.qemu or {})
        return cls(q.get("machine", "virt"), q.get("cpu", "cortex-a53"), str(q.get("memory", "4G")),
                   int(smp or q.get("smp", 2)))

    def args(self) -> list[str]:
        return ["-cpu", self.cpu, "-m", self.memory, "-smp", str(self.smp), "-nodefaults", "-display", "none"]


def make_dtb(out: Path, machine: Machine, dtsi: Path | None = None) -> Path:
    """QEMU's device tree for ``machine`` (``-machine …,dumpdtb=``), without the random
    ``rng-seed``/``kaslr-seed`` (the same inputs give the same DTB; entropy comes from
    virtio-rng), with ``/include/ "<dtsi>"`` appended when given; compiled with dtc."""
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_name(out.stem + ".qemu.dtb")
    run_tool([machine.qemu, "-machine", f"{machine.machine},dumpdtb={raw}", *machine.args()],
         f"dump QEMU's device tree ({machine.qemu})")
    dts = run_tool(["dtc", "-q", "-I", "dtb", "-O", "dts", str(raw)], "decompile QEMU's device tree (dtc)").stdout
    lines = [ln for ln in dts.splitlines() if not ln.strip().startswith(("rng-seed", "kaslr-seed"))]
    src = out.with_suffix(".dts")
    if dtsi is not None:
        lines.append(f'/include/ "{Path(dtsi).resolve()}"')
    src.write_text("\n".join(lines) + "\n")
    run_tool(["dtc", "-q", "-I", "dts", "-O", "dtb", "-o", str(out), str(src)], "compile the board's device tree (dtc)")
    return out


def make_disk(path: Path, size_mib: int = 64) -> Path:
    """An empty ext4 image for the install path (persistence across reboots)."""
    with open(path, "wb") as f:
        f.truncate(size_mib << 20)
    run_tool(["mkfs.ext4", "-q", "-F", "-L", "q25", str(path)], "make the board's ext4 disk (e2fsprogs)")
    return path


# -- boot ---------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class QemuBoard:
    workdir: Path
    port: int
    pid: int
    serial_log: Path
    argv: list[str]
    started: float
    stopped: bool = False

    def alive(self) -> bool:
        """QEMU still runs (the pid is still ours: its command line names our pidfile)."""
        if self.stopped:
            return False
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.workdir / "qemu.pid").encode() in cmdline

    def serial(self) -> str:
        try:
            return self.serial_log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate QEMU (the pid from its pidfile) and wait until it is gone."""
        if not self.alive():
            self.stopped = True
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.stopped = True


def boot(workdir: Path, *, kernel: Path, initrd: Path, dtb: Path | None, machine: Machine,
         port: int | None = None, disk: Path | None = None, append: str = "console=ttyAMA0 panic=-1") -> QemuBoard:
    """Start QEMU daemonised (pidfile and serial log in ``workdir``), SSH forwarded from
    127.0.0.1:``port``. Returns once QEMU runs; see :func:`wait_for_ssh`."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    pidfile, serial = workdir / "qemu.pid", workdir / "serial.log"
    for p in (pidfile, serial, workdir / "monitor.sock"):
        p.unlink(missing_ok=True)
    argv = [machine.qemu, "-machine", machine.machine, *machine.args(),
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:22", "-device", "virtio-net-device,netdev=n0",
            "-device", "virtio-rng-device",
            "-serial", f"file:{serial}", "-daemonize", "-pidfile", str(pidfile),
            "-monitor", f"unix:{workdir / 'monitor.sock'},server=on,wait=off"]
    if dtb is not None:
        argv += ["-dtb", str(dtb)]
    if disk is not None:
        argv += ["-drive", f"file={disk},format=raw,if=none,id=hd0", "-device", "virtio-blk-device,drive=hd0"]
    started = time.monotonic()
    run_tool(argv, "start QEMU")
    pid = int(pidfile.read_text().split()[0])
    return QemuBoard(workdir, port, pid, serial, argv, started)


def monitor(board: QemuBoard, command: str, timeout: float = 60.0) -> str:
    """Run a QEMU monitor (HMP) command; returns its output. ``pmemsave ADDR SIZE "FILE"``
    reads guest physical memory from outside the guest."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(board.workdir / "monitor.sock"))

        def until_prompt() -> bytes:
            buf = b""
            while not buf.endswith(b"(qemu) "):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            return buf

        until_prompt()
        s.sendall(command.encode() + b"\n")
        out = until_prompt().decode(errors="replace")
    # HMP echoes the command line (with terminal escapes); keep what follows it
    return out.split("\n", 1)[1].rsplit("(qemu)", 1)[0] if "\n" in out else ""


def read_physical(board: QemuBoard, base: int, size: int, out: Path) -> bytes:
    """Guest physical memory [base, base+size), read by QEMU (not by anything in the guest)."""
    out.unlink(missing_ok=True)
    reply = monitor(board, f'pmemsave {base:#x} {size:#x} "{out}"')
    if not out.is_file() or out.stat().st_size != size:
        raise BoardError(f"pmemsave {base:#x} {size:#x} gave no file: {reply.strip()}")
    return out.read_bytes()


def wait_for_ssh(board: QemuBoard, timeout: float = 120.0) -> float:
    """Wait until the board's SSH server sends its banner; returns the seconds since launch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not board.alive():
            raise BoardError(f"QEMU exited during boot; serial log:\n{board.serial()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", board.port), timeout=2) as s:
                s.settimeout(3)
                if s.recv(64).startswith(b"SSH-"):
                    return time.monotonic() - board.started
        except OSError:
            pass
        time.sleep(0.25)
    raise BoardError(f"no SSH banner on 127.0.0.1:{board.port} after {timeout:.0f} s; serial log:\n"
                     f"{board.serial()[-3000:]}")
