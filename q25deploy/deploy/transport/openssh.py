"""Large uploads through OpenSSH's ``ssh`` client, beside the paramiko session.

paramiko builds every 32 KiB packet in Python, so a large partition costs it several times
the CPU OpenSSH's ``ssh`` needs (AES-GCM both). Where the workstation's CPU is what
limits the deploy (the board on loopback, several boards under ``--jobs``, a fast link), a
file of :data:`MIN_SIZE` or more goes through one ``ssh`` process that runs the same
receiver command on the board; everything else stays on the paramiko session.

That ``ssh`` logs in only as the session did, and is told so explicitly, with no user or
system ``ssh_config`` (``-F none``) that could send it elsewhere:

- the peer address and port the session's socket reached (no ``ProxyJump``: a session
  through a gateway sends with paramiko);
- the session's user, and the ``--identity`` key alone (``IdentitiesOnly``; no agent, but an
  encrypted key through the agent that holds it, see :mod:`.identity`), or,
  without one, the agent and the default keys, as paramiko looks for them;
- the known_hosts file the session checked, under the name paramiko looked up
  (``HostKeyAlias``), ``StrictHostKeyChecking=yes``, and nothing written back to it;
- ``BatchMode`` (never a prompt) and the session's cipher and MAC order; key exchanges
  post-quantum first where the client has ML-KEM, then those paramiko offers (OpenSSH 9's
  ``sntrup761`` costs a login much CPU, an A53 several times a workstation's).

The remote command prints a ready line before the receiver starts. An ``ssh`` that exits
before it could not log in (or is not OpenSSH): the file goes through paramiko, and so do the
later ones. After the ready line, any failure fails the upload.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import BinaryIO

from ...common import cache_dir, write_atomic
from . import interrupt
from .identity import encrypted
from .limits import MAX_ANSWER, MAX_LINE, keep_tail

# paramiko's extra CPU per MB outweighs an ssh login (most of it hidden by Bulk.warm) from
# about this size (bench/bench_deploy.py measures both ways)
MIN_SIZE = 16 << 20
READY = b"q25deploy: receiving"
ANNOUNCE = f"echo {shlex.quote(READY.decode())} && "  # the board's shell, logged in, says so first
CHUNK = 1 << 20
PIPE_BYTES = 1 << 20
GATE_WAIT = 30.0  # the longest a session's start or end waits for the other kind (SessionGate)
KEX = (
    "mlkem768x25519-sha256",
    "curve25519-sha256",
    "curve25519-sha256@libssh.org",
    "ecdh-sha2-nistp256",
    "ecdh-sha2-nistp384",
    "ecdh-sha2-nistp521",
    "diffie-hellman-group16-sha512",
    "diffie-hellman-group-exchange-sha256",
    "diffie-hellman-group14-sha256",
)


class Unavailable(Exception):
    """``ssh`` did not reach the board's shell (no login, not OpenSSH): send with paramiko."""


@dataclass(frozen=True)
class Login:
    """What the paramiko session logged in with, for ``ssh`` to do the same."""

    address: str  # the peer the session's socket reached
    port: int
    user: str
    host_key_alias: str  # the name paramiko checked in known_hosts ("[host]:port" off port 22)
    known_hosts: str
    identity: str | None
    connect_timeout: float
    ciphers: tuple[str, ...]
    macs: tuple[str, ...]
    control: str | None = None  # a ControlMaster's socket (sshboard.py): logins share its connection


@cache
def _algorithms(client: str) -> dict[str, frozenset[str]]:
    """``ssh -Q cipher|mac|kex`` (an algorithm ``ssh`` does not know makes it refuse the whole
    list): kept in the cache folder for this very ``ssh`` binary (its path, inode, size and
    modification time), since the three queries would delay every login; asked again,
    the three at once, when the binary changed or the cache is unreadable."""
    try:
        st = os.stat(client)
        key = f"{os.path.realpath(client)}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        key = None
    cached = cache_dir() / "ssh-algorithms.json"
    if key:
        try:
            doc = json.loads(cached.read_text(encoding="utf-8"))
            if doc.get("ssh") == key and all(isinstance(doc.get(k), list) for k in _QUERIES):
                return {k: frozenset(map(str, doc[k])) for k in _QUERIES}
        except (OSError, ValueError, AttributeError):
            pass
    known = _ask_algorithms(client)
    if key and all(known.values()):
        try:  # a convenience: a read-only home still works
            doc = json.dumps({"ssh": key, **{k: sorted(v) for k, v in known.items()}})
            write_atomic(cached, doc.encode("utf-8"), sync=False)
        except OSError:
            pass
    return known


_QUERIES = ("cipher", "mac", "kex")


def _ask_algorithms(client: str) -> dict[str, frozenset[str]]:
    """``ssh -Q`` for each of :data:`_QUERIES`, run at once."""
    procs = {}
    for kind in _QUERIES:
        try:
            procs[kind] = subprocess.Popen(
                [client, "-Q", kind], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **interrupt.CHILD
            )
        except OSError:
            pass
    known: dict[str, frozenset[str]] = {kind: frozenset() for kind in _QUERIES}
    for kind, proc in procs.items():
        try:
            out = proc.communicate(timeout=10)[0]
        except subprocess.SubprocessError:
            proc.kill()
            proc.communicate()
            out = ""
        known[kind] = frozenset(out.split())
    return known


def _supported(client: str, kind: str) -> frozenset[str]:
    return _algorithms(client).get(kind, frozenset())


def _config_path(path: str) -> str | None:
    """A path as an ``ssh -o`` value: ``%`` escaped; None where ``ssh`` would split or expand it."""
    path = os.path.abspath(path)
    if any(c.isspace() or c in "\"'\\" for c in path) or "${" in path:
        return None
    return path.replace("%", "%%")


def ssh_argv(client: str, login: Login, command: str, *, master: bool = False) -> list[str] | None:
    """The ``ssh`` command line for ``command`` on the board, or None where ``ssh`` cannot be
    told exactly what the session used (a path it would expand, no common algorithm). With
    ``login.control``: the connection's master (``master``), or a session through it."""
    known_hosts = _config_path(login.known_hosts)
    control = _config_path(login.control) if login.control else ""
    identity = _config_path(login.identity) if login.identity else ""
    pick = lambda ours, kind: ",".join(a for a in ours if a in _supported(client, kind))  # noqa: E731
    ciphers, macs, kex = pick(login.ciphers, "cipher"), pick(login.macs, "mac"), pick(KEX, "kex")
    if known_hosts is None or identity is None or control is None or not (ciphers and macs and kex):
        return None
    opts = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": known_hosts,
        "GlobalKnownHostsFile": "/dev/null",
        "HostKeyAlias": login.host_key_alias.replace("%", "%%"),
        "CheckHostIP": "no",
        "UpdateHostKeys": "no",
        "LogLevel": "ERROR",
        "ConnectTimeout": str(max(1, round(login.connect_timeout))),
        "ServerAliveInterval": "15",
        "ServerAliveCountMax": "4",
        "Compression": "no",
        "Ciphers": ciphers,
        "MACs": macs,
        "KexAlgorithms": kex,
    }
    if identity:  # the key alone; an encrypted one through the agent that holds it (identity.py)
        opts.update(IdentityFile=identity, IdentitiesOnly="yes")
        if not encrypted(login.identity or ""):
            opts.update(IdentityAgent="none")
    if control:  # a master of our own only: never one a user's ssh left running
        opts.update(ControlPath=control, ControlMaster="yes" if master else "no", ControlPersist="no")
    argv = [client, "-F", "none", "-T", "-x", "-a", "-p", str(login.port), "-l", login.user]
    for key, value in opts.items():
        argv += ["-o", f"{key}={value}"]
    return [*argv, "--", login.address, command]


def find_client() -> str | None:
    return shutil.which("ssh")


def _collect(stream, sink: bytearray, ready: threading.Event | None = None, arrived=None, started=None) -> None:
    """``stream`` into ``sink``; with ``ready``: what comes before the ready line (a board's
    shell start-up may print) is dropped, and ``ready`` is set when it arrives. ``arrived``
    (a Condition) is notified of each block, and of the end. ``started`` is called once the
    ready line came or the stream ended."""
    try:
        while ready is not None and not ready.is_set():
            line = stream.readline(MAX_LINE)  # a board's endless line is read in bounded parts
            if not line:
                return  # ended before it: ssh did not log in
            if line.rstrip(b"\n") == READY:
                ready.set()
        if started is not None:
            started()
        read = getattr(stream, "read1", stream.read)  # what has come, not a full block
        for block in iter(lambda: read(65536), b""):
            if arrived is None:
                keep_tail(sink, block)  # stderr: its end says why
                continue
            with arrived:
                if len(sink) + len(block) > MAX_ANSWER:
                    return  # more than any answer the reader waits for: it sees the end
                sink += block
                arrived.notify_all()
    finally:
        if started is not None:
            started()
        if arrived is not None:
            with arrived:
                arrived.ended = True
                arrived.notify_all()


def _feed(src: BinaryIO, size: int, out: int, progress: Callable[[int], None] | None) -> None:
    """``size`` bytes of ``src`` into the pipe ``out``: sendfile where ``src`` is a file (no
    copy through Python), read and write otherwise."""
    sent, fd, offset = 0, None, 0
    try:
        fd, offset = src.fileno(), src.tell()
    except (AttributeError, OSError, ValueError):
        fd = None
    while sent < size:
        interrupt.check()  # Ctrl-C: between chunks (an upload is always before the switch)
        want = min(CHUNK, size - sent)
        n = 0
        if fd is not None:
            try:
                n = os.sendfile(out, fd, offset + sent, want)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.ENOSYS):  # not a pair that sendfiles: copy
                    raise
                src.seek(offset + sent)
                fd = None
        if fd is None:
            view = memoryview(src.read(want))
            n = len(view)
            while view:
                view = view[os.write(out, view) :]
        if n == 0:
            raise EOFError("the local file ended early")
        sent += n
        if progress:
            progress(n)


def _widen(pipe: int) -> None:
    """A 1 MiB pipe into ``ssh``: with the default 64 KiB, ``ssh`` and the feeder took turns."""
    try:
        fcntl.fcntl(pipe, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass  # above fs.pipe-max-size, or not Linux: it stays as it was


class SessionGate:
    """Keeps the sessions of one connection from starting while one of them ends.

    dropbear 2022.82 to 2024.85 closes a session channel that is open but has not started its
    command yet (no pid) whenever a child of the connection exits meanwhile (its SIGCHLD runs
    ``check_close`` on every channel: dropbear commit 71521d1b, issue #321): the session ends
    with no exit status (``ssh`` exits 255 and says nothing), or the command is started anyway
    and its first output fails an assertion that ends the whole connection. So a session start
    (from ``ssh`` starting to the board's ready line) waits while a session ends (from its
    standard input closing to its ``ssh`` exiting), and the other way round; starts run
    together, and so do ends. A wait is bounded (:data:`GATE_WAIT`): a board that never
    finishes a start (no ready line) slows the others down, it does not hang them."""

    def __init__(self, wait: float = 0.0) -> None:
        self._cond = threading.Condition()
        self._count = {"start": 0, "end": 0}
        self.wait = wait or GATE_WAIT

    def enter(self, phase: str) -> Callable[[], None]:
        """Wait until no session is in the other phase (at most :attr:`wait` s), enter
        ``phase``; returns its leave (to call once; later calls do nothing)."""
        other = "end" if phase == "start" else "start"
        with self._cond:
            self._cond.wait_for(lambda: self._count[other] == 0, self.wait)
            self._count[phase] += 1
        left = threading.Event()

        def leave() -> None:
            with self._cond:
                if not left.is_set():
                    left.set()
                    self._count[phase] -= 1
                    self._cond.notify_all()

        return leave


class Arrivals(threading.Condition):
    """Notified as a stream's bytes arrive; ``ended`` once it closed."""

    ended = False


class _Login:
    """One ``ssh`` process; the board's shell prints :data:`READY` once it is logged in."""

    def __init__(self, argv: list[str], gate: SessionGate | None = None, killable: bool = False) -> None:
        """``killable``: an upload's, killed at once on Ctrl-C (:func:`.interrupt.request`)."""
        self.gate = gate  # the connection's, where sessions share one (see SessionGate)
        self._started = gate.enter("start") if gate else lambda: None
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                **interrupt.CHILD,
            )
        except BaseException:
            self._started()
            raise
        interrupt.track(self.proc, killable)
        stdin, stdout, stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
        if stdin is None or stdout is None or stderr is None:  # all three are PIPE: never
            raise OSError(f"{argv[0]}: no pipes to the process")
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.out, self.err, self.ready = bytearray(), bytearray(), threading.Event()
        self.arrived = Arrivals()  # what the board's shell prints after the ready line
        self.readers = [
            threading.Thread(
                target=_collect, args=(self.stdout, self.out, self.ready, self.arrived, self._started), daemon=True
            ),
            threading.Thread(target=_collect, args=(self.stderr, self.err), daemon=True),
        ]
        for t in self.readers:
            t.start()

    def wait_ready(self, timeout: float) -> None:
        """:class:`Unavailable` (the process closed) when ``ssh`` ended before the ready line."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.02):
            if self.proc.poll() is not None:
                self.readers[0].join()
                if not self.ready.is_set():
                    self.close()
                    raise Unavailable(last_line(self.err) or f"ssh exited with {self.proc.returncode}")
            elif time.monotonic() > deadline:
                self.close()
                raise Unavailable(f"no login in {timeout:.0f} s")

    def send(self, line: bytes, src: BinaryIO, size: int, progress, timeout: float) -> tuple[int, bytes, bytes]:
        """``line`` (the command line a waiting shell reads, or nothing), then ``size`` bytes of
        ``src``; returns (status, stdout after the ready line, stderr) and closes."""
        try:
            stdin = self.stdin.fileno()
            _widen(stdin)
            if line:
                os.write(stdin, line)  # a few hundred bytes into an empty 1 MiB pipe: all of it
            _feed(src, size, stdin, progress)
        except BrokenPipeError:
            pass  # ssh or the receiver ended early: its status and message say why
        except interrupt.Interrupted:
            self.proc.kill()  # Ctrl-C: the receiver's file is cut short, the staging dropped
            self.close()
            raise
        ended = self.gate.enter("end") if self.gate else lambda: None  # EOF ends the receiver
        try:
            try:
                self.stdin.close()
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=timeout)
        finally:
            self.close()
            ended()
        return self.proc.returncode, bytes(self.out), bytes(self.err)

    def close(self) -> None:
        """End the process: EOF first (a waiting shell's read fails and it exits), then a kill."""
        try:
            self.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for t in self.readers:
            t.join(timeout=5)
        for f in (self.stdout, self.stderr):
            f.close()
        interrupt.untrack(self.proc)
        self._started()


def last_line(data: bytes | bytearray) -> str:
    """The last line of a command's output (what says why it failed), or ""."""
    lines = bytes(data).decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


class Bulk:
    """Uploads of one board session through ``ssh`` (see the module text)."""

    def __init__(self, client: str, login: Login) -> None:
        self.client, self.login = client, login
        self._lock = threading.Lock()
        self._waiting: _Login | None = None  # logged in ahead (warm), for the next upload
        self.gate = SessionGate() if login.control else None  # sessions of one connection

    @classmethod
    def for_session(
        cls,
        conn,
        transport,
        *,
        known_hosts: str,
        identity: str | None,
        connect_timeout: float,
        ciphers: tuple[str, ...],
        macs: tuple[str, ...],
    ) -> Bulk | None:
        """For a fabric ``conn`` logged in over ``transport``; None without an ``ssh`` client or
        where the session did not reach the board directly (a gateway, a proxy command)."""
        client, sock = find_client(), getattr(transport, "sock", None)
        if client is None or getattr(conn, "gateway", None) or not isinstance(sock, socket.socket):
            return None
        try:
            address, port = sock.getpeername()[:2]
        except OSError:
            return None
        alias = conn.host if conn.port == 22 else f"[{conn.host}]:{conn.port}"  # as paramiko looks it up
        return cls(
            client, Login(address, port, conn.user, alias, known_hosts, identity, connect_timeout, ciphers, macs)
        )

    def warm(self) -> None:
        """Log in now, ahead of the first file (so the login's time is hidden): the board's shell
        then waits for that upload's command line."""
        argv = ssh_argv(self.client, self.login, ANNOUNCE + 'IFS= read -r c && eval "$c"')
        with self._lock:
            if argv is not None and self._waiting is None:
                self._waiting = _Login(argv, self.gate, killable=True)

    def upload(self, command: str, src: BinaryIO, size: int, progress, timeout: float) -> tuple[int, bytes, bytes]:
        """``command`` (a quoted shell command line) on the board with ``size`` bytes of ``src``
        on its standard input: (status, stdout, stderr). :class:`Unavailable` when ``ssh``
        cannot be told what the session used or does not log in."""
        with self._lock:
            login, self._waiting = self._waiting, None
        line = command.encode() + b"\n"
        if login is None or "\n" in command:  # none waiting, or a line the shell's read would cut
            if login is not None:
                login.close()
            argv = ssh_argv(self.client, self.login, ANNOUNCE + command)
            if argv is None:
                raise Unavailable("ssh cannot be given this session's key, known_hosts or algorithms")
            login, line = _Login(argv, self.gate, killable=True), b""
        login.wait_ready(self.login.connect_timeout + 30)
        return login.send(line, src, size, progress, timeout)

    def close(self) -> None:
        with self._lock:
            login, self._waiting = self._waiting, None
        if login is not None:
            login.close()
