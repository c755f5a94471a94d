"""A daemonised QEMU: start it (pidfile, serial log, HMP monitor socket), tell whether it still
runs (only the process our pidfile names, and only while its command line is the QEMU we
started), talk to its monitor, read guest physical memory, wait for the SSH banner, stop it.

Nothing here talks to anything but loopback and QEMU's own sockets."""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from q25deploy.errors import DeployError, ToolError, UsageError

from .machine import Boot, Files, Machine, qemu_argv, run_tool


def qemu_cmdline(pid: int) -> list[str]:
    """The argv of process ``pid`` ([] when it is gone or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def is_our_qemu(pid: int, pidfile: Path, argv: list[str] | None = None) -> bool:
    """Process ``pid`` is the QEMU we started: its command line is ``argv`` when given (else a
    ``qemu-system-*``) and names ``pidfile`` as its ``-pidfile``."""
    cmdline = qemu_cmdline(pid)
    if not cmdline or (cmdline != argv if argv else not os.path.basename(cmdline[0]).startswith("qemu-system-")):
        return False
    return any(a == "-pidfile" and b == str(pidfile) for a, b in zip(cmdline, cmdline[1:]))


@dataclass
class QemuBoard:
    """A QEMU this module started (or found recorded in a state directory)."""

    state_dir: Path
    port: int
    pid: int
    argv: list[str]
    started: float  # time.monotonic() at launch (0 when found afterwards)
    stopped: bool = False

    @property
    def files(self) -> Files:
        return Files.in_dir(self.state_dir)

    @property
    def serial_log(self) -> Path:
        return self.files.serial_log

    def alive(self) -> bool:
        """QEMU still runs (the pid is still ours: its command line is the one we started)."""
        return not self.stopped and is_our_qemu(self.pid, self.files.pidfile, self.argv or None)

    def serial(self) -> str:
        try:
            return self.serial_log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> str:
        """Stop QEMU: the monitor's ``quit``, then SIGTERM, then SIGKILL, each after ``timeout``
        seconds (only while the pid is still our QEMU). Returns how it ended."""
        how = "not running"
        for step in ("quit", signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                break
            how = step if isinstance(step, str) else step.name
            try:
                if isinstance(step, str):
                    monitor(self, "quit", timeout=min(timeout, 5.0))
                else:
                    os.kill(self.pid, step)
            except (OSError, DeployError):
                pass  # the socket or the process went away meanwhile: the next check says
            _wait_gone(self, timeout)
        self.stopped = True
        return how


def _wait_gone(board: QemuBoard, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while board.alive() and time.monotonic() < deadline:
        time.sleep(0.05)


def port_in_use(port: int) -> bool:
    """Something listens on 127.0.0.1:``port`` (QEMU's forward could not bind it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def boot(state_dir: Path, machine: Machine, spec: Boot) -> QemuBoard:
    """Start QEMU daemonised (pidfile, serial log and monitor socket in ``state_dir``), SSH
    forwarded from 127.0.0.1:``spec.port``. Returns once QEMU runs; see :func:`wait_for_ssh`."""
    for what, path in (
        ("kernel", spec.kernel),
        ("initrd", spec.initrd),
        *(("drive", d) for d in spec.drives),
        ("device tree", spec.dtb),
    ):
        if path is not None and not Path(path).is_file():
            raise UsageError(f"{what} {path}: no such file")
    if port_in_use(spec.port):
        raise UsageError(
            f"127.0.0.1:{spec.port} is in use (another board or program listens there): give another --ssh-port"
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    files = Files.in_dir(state_dir)
    for p in (files.pidfile, files.serial_log, files.monitor):
        p.unlink(missing_ok=True)
    argv = qemu_argv(machine, spec, files)
    started = time.monotonic()
    run_tool(argv, "start QEMU")
    try:
        pid = int(files.pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        raise ToolError(f"QEMU started but wrote no pid to {files.pidfile}") from None
    return QemuBoard(Path(os.path.abspath(state_dir)), spec.port, pid, argv, started)


def serial_tail(board: QemuBoard, lines: int = 3) -> str:
    """The last lines of the serial log on one line (for an error message)."""
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in board.serial())
    tail = [ln.strip()[-160:] for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) if tail else "(empty)"


def wait_for_ssh(board: QemuBoard, timeout: float = 120.0) -> float:
    """Wait until the board's SSH server sends its banner; returns the seconds since launch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not board.alive():
            raise DeployError(f"QEMU exited during boot; the serial log {board.serial_log} ends: {serial_tail(board)}")
        if ssh_banner(board.port):
            return time.monotonic() - board.started
        time.sleep(0.25)
    raise DeployError(
        f"no SSH banner on 127.0.0.1:{board.port} after {timeout:.0f} s (QEMU still runs, pid "
        f"{board.pid}); the serial log {board.serial_log} ends: {serial_tail(board)}"
    )


def ssh_banner(port: int) -> bool:
    """An SSH server answers on 127.0.0.1:``port`` (it sends ``SSH-...``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.settimeout(3)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def monitor(board: QemuBoard, command: str, timeout: float = 60.0) -> str:
    """Run a QEMU monitor (HMP) command; returns its output. ``pmemsave ADDR SIZE "FILE"``
    reads guest physical memory from outside the guest."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(timeout)
            s.connect(str(board.files.monitor))
            _until_prompt(s)
            s.sendall(command.encode() + b"\n")
            out = _until_prompt(s).decode(errors="replace")
    except OSError as e:
        raise DeployError(f"QEMU monitor {board.files.monitor}: {e}") from None
    # HMP echoes the command line (with terminal escapes); keep what follows it
    return out.split("\n", 1)[1].rsplit("(qemu)", 1)[0] if "\n" in out else ""


def _until_prompt(s: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"(qemu) "):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def read_physical(board: QemuBoard, base: int, size: int, out: Path) -> bytes:
    """Guest physical memory [base, base+size), read by QEMU (not by anything in the guest)."""
    out = Path(os.path.abspath(out))
    if '"' in str(out) or "\\" in str(out):
        raise UsageError(f"{out}: the monitor cannot take this path")
    out.unlink(missing_ok=True)
    reply = monitor(board, f'pmemsave {base:#x} {size:#x} "{out}"')
    if not out.is_file() or out.stat().st_size != size:
        raise DeployError(f"pmemsave {base:#x} {size:#x} gave no file: {reply.strip()}")
    return out.read_bytes()
