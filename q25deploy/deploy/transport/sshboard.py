"""A board session carried by OpenSSH's ``ssh`` client alone: one login, shared.

paramiko costs a command about as long as the whole of ``ssh host true`` before it can even
connect (importing fabric, invoke, paramiko and cryptography). So
where OpenSSH's ``ssh`` is installed, the session is one ``ssh`` master process that logs in
once and holds the connection (``ControlMaster``, its socket in a private 0700 directory that
is removed at the end); every command, the agent, the lock holder and each upload is an
``ssh`` session through that connection: no further login. The master logs in exactly as
:mod:`.openssh` describes (``-F none``, the known_hosts file checked strictly under the name
paramiko would look up, ``BatchMode``, the identity alone): an unknown or changed host key is
refused with the same errors as the paramiko session's.

Used when the command needs nothing only paramiko does (see :func:`usable`): no
``--trust-new-host`` (paramiko records the key), no ``~/.ssh/config`` (fabric reads it: host
aliases, gateways), ``--transfer auto``. Where ``ssh`` does not log in for another reason than
a refused host key or no connection (a key it will not use: one others can read), paramiko
tries, as before.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from ...errors import DeployError, HostKeyError, Q25Error
from . import interrupt, openssh, reach
from .agent import PLAIN
from .algorithms import CIPHERS, MACS
from .boardbase import UPLOAD_TIMEOUT, BoardSession, changed_key, known_hosts_path, unknown_key
from .hosts import HostSpec
from .limits import CHUNK, MAX_ANSWER, keep_tail, too_large

# the master's own session: says it logged in, then holds the connection until its stdin closes
# the master's own session: says it logged in, then serves the session's read-only commands
# (the agent of :func:`~.boardlock.board_session`, see :meth:`OpenSshSession.take_agent`) until
# its stdin closes, which also ends the connection
HOLD = openssh.ANNOUNCE + "exec sh -c " + shlex.quote(PLAIN) + " sh"
CONNECT_TIMEOUT = 15.0


def usable(*, transfer: str, trust_new_host: bool) -> str | None:
    """The ``ssh`` client to carry the whole session, or None (paramiko carries it)."""
    if transfer != "auto" or trust_new_host or Path("~/.ssh/config").expanduser().exists():
        return None
    return openssh.find_client()


class ProcessChannel:
    """One command on the board through an ``ssh`` process, with the methods of a paramiko
    ``Channel`` that the agent and the board lock use."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **interrupt.CHILD
        )
        interrupt.track(self.proc)
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self._in, self._out, self._errf = self.proc.stdin, self.proc.stdout, self.proc.stderr
        self._err = bytearray()
        self._timeout: float | None = None
        self._reader = threading.Thread(target=self._collect_stderr, daemon=True)
        self._reader.start()

    def _collect_stderr(self) -> None:
        fd = self._errf.fileno()
        for block in iter(lambda: os.read(fd, CHUNK), b""):
            keep_tail(self._err, block)  # what says why is at its end

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def recv(self, n: int) -> bytes:
        if self._timeout is not None and not select.select([self._out], [], [], self._timeout)[0]:
            raise TimeoutError(f"no answer in {self._timeout:g} s")
        return os.read(self._out.fileno(), min(n, CHUNK))  # n may be what a board announced

    def sendall(self, data: bytes) -> None:
        self._in.write(data)
        self._in.flush()

    def shutdown_write(self) -> None:
        self._in.close()

    def recv_exit_status(self) -> int:
        try:
            return self.proc.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"no exit in {self._timeout:g} s") from None

    def stderr(self) -> bytes:
        """What ``ssh`` and the command wrote to stderr (all of it once the process ended)."""
        if self.proc.poll() is not None:
            self._reader.join(timeout=5)
        return bytes(self._err)

    def recv_stderr_ready(self) -> bool:
        return bool(self.stderr())

    def recv_stderr(self, n: int) -> bytes:
        data = bytes(self._err[:n])
        del self._err[:n]
        return data

    def abort(self) -> None:
        """End the command's ``ssh`` now (the board's end may be blocked writing to it)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def close(self) -> None:
        try:
            self._in.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        self._out.close()
        self._errf.close()
        interrupt.untrack(self.proc)


def _login_error(spec: HostSpec, known_hosts: str, said: str) -> Q25Error | openssh.Unavailable:
    """The master's failure to log in: a host key refused or no connection, as the paramiko
    session would have said it; anything else (a key ``ssh`` will not use, an authentication
    it does not do): :class:`openssh.Unavailable`, and paramiko tries."""
    low = said.lower()
    last = openssh.last_line(said.encode()) or "ssh failed"
    if "has changed" in low or "identification has changed" in low:
        return changed_key(spec, known_hosts)
    if "host key verification failed" in low or "host key is known" in low:
        return unknown_key(spec, known_hosts)
    why = reach.from_ssh(said)
    if why:
        return reach.cannot_connect(spec, why)
    if any(w in low for w in ("connection refused", "timed out", "no route to host", "could not resolve")):
        return DeployError(f"{spec.name}: cannot connect: {last}")
    return openssh.Unavailable(last)


class MasterChannel:
    """The master's own session (a logged-in :class:`openssh._Login` whose board shell runs
    the plain agent) with the methods of a channel that :class:`~.agent.Agent` uses: its
    commands need no ``ssh`` process and no session of their own."""

    def __init__(self, login: openssh._Login) -> None:
        self.login, self._pos = login, 0
        self._timeout: float | None = None

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def recv(self, n: int) -> bytes:
        out, cond = self.login.out, self.login.arrived
        with cond:
            if not cond.wait_for(lambda: len(out) > self._pos or cond.ended, self._timeout):
                raise TimeoutError(f"no answer in {self._timeout:g} s")
            data = bytes(out[self._pos : self._pos + n])
            self._pos += len(data)
            if self._pos > CHUNK:  # what was read is not kept
                del out[: self._pos]
                self._pos = 0
            return data

    def sendall(self, data: bytes) -> None:
        self.login.stdin.write(data)

    def shutdown_write(self) -> None:
        """The agent's stdin closes: it ends, and so does the connection (the session is over)."""
        self.login.stdin.close()

    def recv_exit_status(self) -> int | None:
        """Not waited for: the session ends with the connection, which the board's close ends."""
        return self.login.proc.poll()

    def close(self) -> None:
        pass  # the board's close ends the master


class PendingLogin:
    """An ``ssh`` master that is logging in: started as soon as the board is known (see
    :func:`begin_login`), while the command imports what it needs, and adopted by
    :class:`OpenSshSession`; :meth:`close` ends one that no board adopted."""

    def __init__(self, spec: HostSpec, client: str, identity: str | None, known_hosts: str | None, timeout: float):
        path = known_hosts_path(known_hosts)
        if known_hosts and not path.is_file():
            raise HostKeyError(f"{known_hosts}: no such known_hosts file")
        self.spec, self.client, self.known_hosts = spec, client, str(path)
        self.dir = tempfile.mkdtemp(prefix="q25ssh-")  # 0700: the control socket is ours alone
        alias = spec.host if spec.port == 22 else f"[{spec.host}]:{spec.port}"  # as paramiko looks it up
        self.login = openssh.Login(
            spec.host, spec.port, spec.user, alias, str(path), identity, timeout, CIPHERS, MACS,
            control=os.path.join(self.dir, "c"),
        )  # fmt: skip
        argv = openssh.ssh_argv(client, self.login, HOLD, master=True)
        if argv is None or len(self.login.control or "") > 100:  # a unix socket path holds 108 bytes
            self.close()
            raise openssh.Unavailable("ssh cannot be given this session's key, known_hosts or algorithms")
        self.master: openssh._Login | None = None
        try:
            self.master = openssh._Login(argv)
        except OSError:
            self.close()
            raise

    def wait(self) -> openssh._Login:
        """The logged-in master; the error paramiko's session would give where it did not log in
        (:class:`openssh.Unavailable` where paramiko might)."""
        master = self.master
        assert master is not None, "adopted once"
        try:
            master.wait_ready(self.login.connect_timeout + 30)
        except openssh.Unavailable:
            self.close()
            raise _login_error(self.spec, self.known_hosts, bytes(master.err).decode("utf-8", "replace")) from None
        self.master = None
        return master

    def close(self) -> None:
        master, self.master = getattr(self, "master", None), None
        if master is not None:
            master.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def begin_login(
    spec: HostSpec, *, identity: str | None, known_hosts: str | None, transfer: str, trust_new_host: bool
) -> PendingLogin | None:
    """Start logging in to ``spec`` now, where OpenSSH's ``ssh`` will carry the session (see
    :func:`usable`); None where it will not, or cannot be told this login (the board's session
    then logs in as before and says why)."""
    client = usable(transfer=transfer, trust_new_host=trust_new_host)
    if client is None:
        return None
    try:
        return PendingLogin(spec, client, identity, known_hosts, CONNECT_TIMEOUT)
    except (openssh.Unavailable, HostKeyError, OSError):
        return None


def begin_logins(specs, opts) -> dict:
    """:func:`begin_login` for each of ``specs`` as ``opts`` (:class:`~.options.Options`) asks:
    host name → PendingLogin, for the logins under way."""
    started: dict = {}
    for spec in specs:
        if spec.name not in started:
            login = begin_login(
                spec,
                identity=opts.identity,
                known_hosts=opts.known_hosts,
                transfer=opts.transfer,
                trust_new_host=opts.trust_new_host,
            )
            if login is not None:
                started[spec.name] = login
    return started


class OpenSshSession(BoardSession):
    """A connected board through one ``ssh`` master (see the module text)."""

    def __init__(
        self,
        spec: HostSpec,
        client: str,
        *,
        identity: str | None,
        known_hosts: str | None,
        connect_timeout: float = CONNECT_TIMEOUT,
        become: str = "none",
        transfer: str = "auto",
        pending: PendingLogin | None = None,
    ) -> None:
        """:class:`openssh.Unavailable` before any login where ``ssh`` cannot be told what the
        paramiko session would use, or it did not log in where paramiko might (then paramiko
        carries the session). ``pending``: the login :func:`begin_login` started for ``spec``."""
        super().__init__(spec, become=become, transfer=transfer)
        if pending is None:
            pending = PendingLogin(spec, client, identity, known_hosts, connect_timeout)
        self._dir, self.login, self.client = pending.dir, pending.login, pending.client
        self.master = pending.wait()
        self.bulk = openssh.Bulk(self.client, self.login)
        self._agent_taken = False

    def take_agent(self) -> MasterChannel | None:
        """The master's session as the plain agent's channel, once, where the agent needs no
        other user (``become`` none: the master's shell is the login user's)."""
        if self._agent_taken or self._become:
            return None
        self._agent_taken = True
        return MasterChannel(self.master)

    def close(self) -> None:
        """End the session: the master's stdin closes, so the board's end ends and then the
        connection; that exit (a few ms) is waited for, and the process killed after 2 s, in
        the background: nothing is left to say to the board."""
        self.bulk.close()
        threading.Thread(target=self.master.close, name="q25-ssh-close", daemon=True).start()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _session(self, command: str) -> list[str]:
        if self.master.proc.poll() is not None:  # never a new login behind a cut connection
            raise DeployError(f"{self.spec.name}: connection lost: {openssh.last_line(self.master.err) or 'ssh ended'}")
        argv = openssh.ssh_argv(self.client, self.login, command)
        assert argv is not None  # the master's was made from the same login
        return argv

    def start(self, argv: Sequence[str], timeout: int) -> ProcessChannel:
        """Start argv on the board (quoted, under ``timeout``): its channel (the board lock, the agent)."""
        chan = ProcessChannel(self._session(self.command(argv, timeout)))
        chan.settimeout(timeout + 30)
        return chan

    def _exec(self, argv: Sequence[str], stdin: bytes, timeout: int) -> tuple[int, bytes, bytes]:
        chan = self.start(argv, timeout)
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out = bytearray()
            for block in iter(lambda: chan.recv(CHUNK), b""):
                out += block
                if len(out) > MAX_ANSWER:
                    raise too_large(self.spec.name, f"answer to {argv[0]}", MAX_ANSWER)
            status, err = chan.recv_exit_status(), chan.stderr()
        except (TimeoutError, OSError) as e:
            raise DeployError(f"{self.spec.name}: connection lost during {argv[0]}: {e}") from None
        finally:
            chan.close()
        if status == 255:  # ssh's own failure (no command of ours exits 255)
            said = openssh.last_line(err) or "ssh exited with 255"
            raise DeployError(f"{self.spec.name}: connection lost during {argv[0]}: {said}")
        return status, bytes(out), err

    def expect_upload(self, size: int) -> None:
        """A file is coming: its ``ssh`` session starts now (the board's shell waits for it)."""
        if size:
            self.bulk.warm()

    def upload(self, src: BinaryIO, size: int, dest: str, progress=None) -> str:
        """Stream ``size`` bytes into ``dest`` on the board, hashed by the board as it writes
        them; returns the board's sha256 (see ``connection.ParamikoSession.upload``)."""
        name = os.path.basename(dest)
        try:
            status, out, err = self.bulk.upload(
                self.command(self.receive_argv(dest), UPLOAD_TIMEOUT), src, size, progress, UPLOAD_TIMEOUT + 30
            )
        except openssh.Unavailable as e:
            raise DeployError(f"{self.spec.name}: connection lost while uploading {name}: {e}") from None
        except (OSError, EOFError) as e:
            raise DeployError(f"{self.spec.name}: uploading {name}: {e}") from None
        if status == 255:
            said = openssh.last_line(err) or "ssh exited with 255"
            raise DeployError(f"{self.spec.name}: connection lost while uploading {name}: {said}")
        return self.digest(dest, status, out, err, err_fails=self.receiver is None)
