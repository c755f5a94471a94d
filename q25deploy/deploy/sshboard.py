"""A board session carried by OpenSSH's ``ssh`` client alone: one login, shared.

paramiko costs a command 0.2-0.3 s before it can even connect (importing fabric, invoke,
paramiko and cryptography), where the whole of ``ssh host true`` takes 0.25-0.30 s here. So
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
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from ..errors import DeployError, HostKeyError, Q25Error
from . import openssh
from .algorithms import CIPHERS, MACS
from .boardbase import UPLOAD_TIMEOUT, BoardBase, changed_key, unknown_key
from .hosts import HostSpec

CHUNK = 1 << 16
# the master's own session: says it logged in, then holds the connection until its stdin closes
HOLD = openssh.ANNOUNCE + "exec cat >/dev/null"


def usable(*, transfer: str, trust_new_host: bool) -> str | None:
    """The ``ssh`` client to carry the whole session, or None (paramiko carries it)."""
    if transfer != "auto" or trust_new_host or Path("~/.ssh/config").expanduser().exists():
        return None
    return openssh.find_client()


class ProcessChannel:
    """One command on the board through an ``ssh`` process, with the methods of a paramiko
    ``Channel`` that the agent and the board lock use."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self._in, self._out, self._errf = self.proc.stdin, self.proc.stdout, self.proc.stderr
        self._err = bytearray()
        self._timeout: float | None = None
        self._reader = threading.Thread(target=self._collect_stderr, daemon=True)
        self._reader.start()

    def _collect_stderr(self) -> None:
        fd = self._errf.fileno()
        for block in iter(lambda: os.read(fd, CHUNK), b""):
            self._err += block

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def recv(self, n: int) -> bytes:
        if self._timeout is not None and not select.select([self._out], [], [], self._timeout)[0]:
            raise TimeoutError(f"no answer in {self._timeout:g} s")
        return os.read(self._out.fileno(), n)

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
    if any(w in low for w in ("connection refused", "timed out", "no route to host", "could not resolve")):
        return DeployError(f"{spec.name}: cannot connect: {last}")
    return openssh.Unavailable(last)


class OpenSshBoard(BoardBase):
    """A connected board through one ``ssh`` master (see the module text)."""

    def __init__(
        self,
        spec: HostSpec,
        client: str,
        *,
        identity: str | None,
        known_hosts: str | None,
        connect_timeout: float = 15.0,
        become: str = "none",
        transfer: str = "auto",
    ) -> None:
        """:class:`openssh.Unavailable` before any login where ``ssh`` cannot be told what the
        paramiko session would use, or it did not log in where paramiko might (then paramiko
        carries the session)."""
        super().__init__(spec, become=become, transfer=transfer)
        path = Path(known_hosts).expanduser() if known_hosts else Path("~/.ssh/known_hosts").expanduser()
        if known_hosts and not path.is_file():
            raise HostKeyError(f"{known_hosts}: no such known_hosts file")
        self._dir = tempfile.mkdtemp(prefix="q25ssh-")  # 0700: the control socket is ours alone
        alias = spec.host if spec.port == 22 else f"[{spec.host}]:{spec.port}"  # as paramiko looks it up
        self.login = openssh.Login(
            spec.host, spec.port, spec.user, alias, str(path), identity, connect_timeout, CIPHERS, MACS,
            control=os.path.join(self._dir, "c"),
        )  # fmt: skip
        self.client = client
        argv = openssh.ssh_argv(client, self.login, HOLD, master=True)
        if argv is None or len(self.login.control or "") > 100:  # a unix socket path holds 108 bytes
            shutil.rmtree(self._dir, ignore_errors=True)
            raise openssh.Unavailable("ssh cannot be given this session's key, known_hosts or algorithms")
        self.master = openssh._Login(argv)
        try:
            self.master.wait_ready(connect_timeout + 30)
        except openssh.Unavailable:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise _login_error(spec, str(path), bytes(self.master.err).decode("utf-8", "replace")) from None
        self.bulk = openssh.Bulk(client, self.login)

    def close(self) -> None:
        self.bulk.close()
        self.master.close()  # its stdin closes: the board's end ends, then the connection
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
        them; returns the board's sha256 (see ``connection.Board.upload``)."""
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
