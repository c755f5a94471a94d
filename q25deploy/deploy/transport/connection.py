"""One board over SSH, through fabric, with host keys checked and every command bounded.

Fabric's ``Connection`` installs paramiko's ``AutoAddPolicy`` and loads no known_hosts; we
replace both before connecting: the known_hosts file (``--known-hosts`` or the user's) is
loaded and unknown keys are refused (``RejectPolicy``), or recorded in that file when the
user said ``--trust-new-host``; a changed key is always refused (paramiko raises before any
policy is asked). Remote commands are argv lists, quoted with ``shlex`` and wrapped in
``timeout``, behind ``sudo -n``/``doas -n`` for a login that is not root (:mod:`.become`).
A file goes to the board's receiver (``q25tok receive``, else ``tee`` into a hash) over a raw
session channel, or, when large, through OpenSSH's ``ssh`` logged in as the session is (see
:mod:`.openssh`); inside a session (``with board.attached(agent)``) the short commands go
through one board-side agent (see :mod:`.agent`) instead of a channel each. paramiko's SFTP
``put`` is several times slower than scp.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import BinaryIO

import paramiko
from fabric import Connection

from ...errors import DeployError, HostKeyError
from . import interrupt, openssh, reach
from .boardbase import (
    COMMAND_TIMEOUT,
    HASH_FILES,
    HASHER,
    RECEIVE,
    UPLOAD_TIMEOUT,
    BoardSession,
    changed_key,
    known_hosts_path,
    unknown_key,
)
from .hosts import HostSpec
from .identity import encrypted, refused
from .limits import MAX_ANSWER, keep_tail, too_large
from .session import CHANNEL_WINDOW, CIPHERS, MACS, MAX_PACKET, RecordNewHost, transport_factory

__all__ = ["COMMAND_TIMEOUT", "HASHER", "HASH_FILES", "RECEIVE", "UPLOAD_TIMEOUT", "ParamikoSession"]
CHUNK = 1 << 20


def _close(chan) -> None:
    """Close a channel; on a dead transport that raises, and must not hide the real error."""
    try:
        chan.close()
    except (paramiko.SSHException, OSError, EOFError):
        pass


class ParamikoSession(BoardSession):
    """A connected board, through paramiko. Use as a context manager."""

    def __init__(
        self,
        spec: HostSpec,
        *,
        identity: str | None,
        known_hosts: str | None,
        trust_new_host: bool,
        connect_timeout: float = 15.0,
        become: str = "none",
        transfer: str = "auto",
    ) -> None:
        super().__init__(spec, become=become, transfer=transfer)
        self.gate = openssh.SessionGate()  # this transport's sessions (see openssh.SessionGate)
        kwargs = {
            "look_for_keys": identity is None,
            "allow_agent": identity is None or encrypted(identity),  # an encrypted key: the agent's copy
            "banner_timeout": connect_timeout,
            "auth_timeout": connect_timeout,
            "channel_timeout": connect_timeout,
            "transport_factory": transport_factory,
        }
        if identity:
            kwargs["key_filename"] = [identity]
        self.conn = Connection(
            spec.host, user=spec.user, port=spec.port, connect_timeout=connect_timeout, connect_kwargs=kwargs
        )
        client = self.conn.client
        path = known_hosts_path(known_hosts)
        if path.is_file():
            client.load_host_keys(str(path))
        elif known_hosts:
            raise HostKeyError(f"{known_hosts}: no such known_hosts file")
        client.set_missing_host_key_policy(RecordNewHost(path) if trust_new_host else paramiko.RejectPolicy())
        try:
            self.conn.open()
        except paramiko.BadHostKeyException:
            raise changed_key(spec, str(path)) from None
        except paramiko.AuthenticationException as e:
            raise refused(spec, identity, _methods(e)) from None
        except paramiko.SSHException as e:
            if "not found in known_hosts" in str(e):
                raise unknown_key(spec, str(path)) from None
            raise DeployError(f"{spec.name}: SSH failed: {e}") from None
        except (TimeoutError, OSError, EOFError) as e:
            why = reach.why_not(e)
            raise (
                reach.cannot_connect(spec, why) if why else DeployError(f"{spec.name}: cannot connect: {e}")
            ) from None
        self.transport = client.get_transport()
        # large files through OpenSSH's ssh where it logs in as this session did (see openssh.py)
        self.bulk = (
            None
            if transfer == "paramiko"
            else openssh.Bulk.for_session(
                self.conn,
                self.transport,
                known_hosts=str(path),
                identity=identity,
                connect_timeout=connect_timeout,
                ciphers=CIPHERS,
                macs=MACS,
            )
        )
        if self.bulk is None and transfer == "openssh":
            self.close()
            raise DeployError(
                f"{spec.name}: --transfer openssh: no ssh client on PATH, or the session goes through a gateway"
            )

    def close(self) -> None:
        if self.bulk is not None:
            self.bulk.close()
        try:
            self.conn.close()
        except Exception:  # closing a dead connection must not hide the real error
            pass

    # -- commands ---------------------------------------------------------------------------
    def _channel(self, argv: Sequence[str], timeout: int, doing: str = ""):
        """``doing``: what the command is for, in the message when the connection is lost."""
        cmd = self.command(argv, timeout)
        started = self.gate.enter("start")  # until the board answers the exec: its command runs
        try:
            chan = self.transport.open_session(window_size=CHANNEL_WINDOW, max_packet_size=MAX_PACKET)
            chan.settimeout(timeout + 30)
            chan.exec_command(cmd)
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as e:
            raise DeployError(f"{self.spec.name}: connection lost{doing}: {e}") from None
        finally:
            started()
        return chan

    def start(self, argv: Sequence[str], timeout: int) -> paramiko.Channel:
        """Start argv on the board (quoted, under ``timeout``) and return its open channel: for a
        command that lives as long as the caller needs it (the board lock)."""
        return self._channel(argv, timeout)

    def _exec(self, argv: Sequence[str], stdin: bytes, timeout: int) -> tuple[int, bytes, bytes]:
        chan = self._channel(argv, timeout)
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = _drain(chan)
            if out is None:
                raise too_large(self.spec.name, f"answer to {argv[0]}", MAX_ANSWER)
            return chan.recv_exit_status(), out, err
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as e:
            raise DeployError(f"{self.spec.name}: connection lost during {argv[0]}: {e}") from None
        finally:
            _close(chan)

    def upload(self, src: BinaryIO, size: int, dest: str, progress=None) -> str:
        """Stream ``size`` bytes into ``dest`` on the board; the board hashes them as it writes
        them (``q25tok receive``, else ``tee`` into a sha256: one pass). Returns the board's
        sha256 of what it wrote. Through ``ssh`` (:mod:`.openssh`) where the session can, to
        ``q25tok receive`` only (its status says whether it wrote): a large file, or with
        ``transfer="openssh"`` every file."""
        argv = self.receive_argv(dest)
        result = None
        if self.bulk is not None and self.receiver and (size >= openssh.MIN_SIZE or self.transfer == "openssh"):
            result = self._upload_openssh(argv, src, size, dest, progress)
        status, out, err = result or self._upload_paramiko(argv, src, size, dest, progress)
        return self.digest(dest, status, out, err, err_fails=result is None)

    def expect_upload(self, size: int) -> None:
        """A file of ``size`` bytes is coming: where it would go through ``ssh``, log that in now."""
        if self.bulk is not None and size and (size >= openssh.MIN_SIZE or self.transfer == "openssh"):
            self.bulk.warm()

    def _upload_openssh(self, argv, src, size: int, dest: str, progress) -> tuple[int, bytes, bytes] | None:
        """None: ``ssh`` did not log in (paramiko sends this file and the rest)."""
        if self.bulk is None:
            return None
        cmd = self.command(argv, UPLOAD_TIMEOUT)
        try:
            status, out, err = self.bulk.upload(cmd, src, size, progress, UPLOAD_TIMEOUT + 30)
        except openssh.Unavailable as e:
            if self.transfer == "openssh":
                raise DeployError(f"{self.spec.name}: --transfer openssh: ssh did not log in: {e}") from None
            self.bulk = None
            self.notes.append(f"OpenSSH's ssh did not log in as the session did ({e}); sent with paramiko")
            return None
        except (OSError, EOFError) as e:
            raise DeployError(f"{self.spec.name}: uploading {os.path.basename(dest)}: {e}") from None
        if status == 255:  # ssh's own failure, not the receiver's
            raise DeployError(
                f"{self.spec.name}: connection lost while uploading {os.path.basename(dest)}: "
                f"{openssh.last_line(err) or 'ssh exited with 255'}"
            )
        return status, out, err

    def _upload_paramiko(self, argv, src, size: int, dest: str, progress) -> tuple[int, bytes, bytes]:
        # a cut that another upload's channel met first fails this one's opening: the same words
        chan = self._channel(argv, UPLOAD_TIMEOUT, f" while uploading {os.path.basename(dest)}")
        sent = 0
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            while sent < size:
                interrupt.check(self)  # Ctrl-C: between chunks
                n = src.readinto(view[: min(CHUNK, size - sent)])
                if not n:
                    raise DeployError(f"{dest}: the local file ended early")
                chan.sendall(view[:n])
                sent += n
                if progress:
                    progress(n)
            ended = self.gate.enter("end")  # EOF ends the receiver
            try:
                chan.shutdown_write()
                out, err = _drain(chan)
                if out is None:
                    raise too_large(self.spec.name, f"answer to uploading {os.path.basename(dest)}", MAX_ANSWER)
                return chan.recv_exit_status(), out, err
            finally:
                ended()
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as e:
            raise DeployError(
                f"{self.spec.name}: connection lost while uploading {os.path.basename(dest)}: {e}"
            ) from None
        finally:
            _close(chan)


def _methods(e: paramiko.AuthenticationException) -> str:
    """The methods the board offered, as ssh names them (``publickey``)."""
    allowed = getattr(e, "allowed_types", None)
    return ",".join(allowed) if allowed else "publickey"


def _drain(chan) -> tuple[bytes | None, bytes]:
    """A command's stdout and the end of its stderr; stdout None where the board sent more
    than :data:`~.limits.MAX_ANSWER` (nothing more is read)."""
    out, err = bytearray(), bytearray()
    while True:
        data = chan.recv(CHUNK)
        if not data:
            break
        out += data
        if len(out) > MAX_ANSWER:
            return None, b""
    while chan.recv_stderr_ready() or not chan.exit_status_ready():
        data = chan.recv_stderr(CHUNK)
        if not data:
            break
        keep_tail(err, data)
    return bytes(out), bytes(err)
