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
import shlex
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import paramiko
from fabric import Connection

from ..errors import DeployError, HostKeyError
from . import openssh
from .become import hint as become_hint
from .become import prefix as become_prefix
from .hosts import HostSpec
from .session import CHANNEL_WINDOW, CIPHERS, MACS, MAX_PACKET, RecordNewHost, transport_factory

COMMAND_TIMEOUT = 120
UPLOAD_TIMEOUT = 3600
CHUNK = 1 << 20


def _close(chan) -> None:
    """Close a channel; on a dead transport that raises, and must not hide the real error."""
    try:
        chan.close()
    except (paramiko.SSHException, OSError, EOFError):
        pass


class Board:
    """A connected board. Use as a context manager."""

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
        self.spec, self.transfer = spec, transfer
        self.become, self._become = become, become_prefix(become)  # sudo -n / doas -n for a login that is not root
        kwargs = {
            "look_for_keys": identity is None,
            "allow_agent": identity is None,
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
        path = Path(known_hosts).expanduser() if known_hosts else Path("~/.ssh/known_hosts").expanduser()
        if path.is_file():
            client.load_host_keys(str(path))
        elif known_hosts:
            raise HostKeyError(f"{known_hosts}: no such known_hosts file")
        client.set_missing_host_key_policy(RecordNewHost(path) if trust_new_host else paramiko.RejectPolicy())
        try:
            self.conn.open()
        except paramiko.BadHostKeyException:
            raise HostKeyError(
                f"{spec.name}: the host key CHANGED since it was recorded in {path}; refusing "
                "(remove the old entry only if you know why it changed)"
            ) from None
        except paramiko.SSHException as e:
            if "not found in known_hosts" in str(e):
                raise HostKeyError(
                    f"{spec.name}: unknown host key (not in {path}); check it and pass --trust-new-host to record it"
                ) from None
            raise DeployError(f"{spec.name}: SSH failed: {e}") from None
        except (TimeoutError, OSError, EOFError) as e:
            raise DeployError(f"{spec.name}: cannot connect: {e}") from None
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
        self.notes: list[str] = []  # what the user should know about this session (a fallback)
        self.agent = None  # the session's agent (see attached)
        self.receiver: str | None = None  # a q25tok that receives uploads (see receiver.py), else the shell's

    @contextmanager
    def attached(self, agent):
        """Run every command of the block through ``agent``; it is closed afterwards."""
        self.agent = agent
        try:
            yield agent
        finally:
            self.agent = None
            agent.close()

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.bulk is not None:
            self.bulk.close()
        try:
            self.conn.close()
        except Exception:  # closing a dead connection must not hide the real error
            pass

    # -- commands ---------------------------------------------------------------------------
    def _channel(self, argv: Sequence[str], timeout: int):
        cmd = shlex.join([*self._become, "timeout", str(timeout), *argv])
        try:
            chan = self.transport.open_session(window_size=CHANNEL_WINDOW, max_packet_size=MAX_PACKET)
            chan.settimeout(timeout + 30)
            chan.exec_command(cmd)
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as e:
            raise DeployError(f"{self.spec.name}: connection lost: {e}") from None
        return chan

    def start(self, argv: Sequence[str], timeout: int) -> paramiko.Channel:
        """Start argv on the board (quoted, under ``timeout``) and return its open channel: for a
        command that lives as long as the caller needs it (the board lock)."""
        return self._channel(argv, timeout)

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: int = COMMAND_TIMEOUT, check: bool = True
    ) -> tuple[int, bytes, bytes]:
        """Run argv on the board (quoted, under ``timeout``); returns (status, stdout, stderr)."""
        if self.agent is not None:
            status, out, err = self.agent.call(argv, stdin, timeout)
        else:
            status, out, err = self._exec(argv, stdin, timeout)
        if check and status != 0:
            last = openssh.last_line(err or out) or "no output"
            raise DeployError(
                f"{self.spec.name}: {shlex.join(argv)[:120]} failed ({status}): "
                f"{last}{become_hint(self.spec.user, self.become, last)}"
            )
        return status, out, err

    def _exec(self, argv: Sequence[str], stdin: bytes, timeout: int) -> tuple[int, bytes, bytes]:
        chan = self._channel(argv, timeout)
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = _drain(chan)
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
        argv = [self.receiver, "receive", dest] if self.receiver else ["sh", "-c", RECEIVE, "sh", dest]
        result = None
        if self.bulk is not None and self.receiver and (size >= openssh.MIN_SIZE or self.transfer == "openssh"):
            result = self._upload_openssh(argv, src, size, dest, progress)
        status, out, err = result or self._upload_paramiko(argv, src, size, dest, progress)
        words = out.split()
        if status != 0 or (err and result is None) or not words:
            last = openssh.last_line(err or out) or "no output"
            raise DeployError(f"{self.spec.name}: writing {dest} failed ({status}: {last})")
        return words[0].decode("ascii", "replace")

    def expect_upload(self, size: int) -> None:
        """A file of ``size`` bytes is coming: where it would go through ``ssh``, log that in now."""
        if self.bulk is not None and size and (size >= openssh.MIN_SIZE or self.transfer == "openssh"):
            self.bulk.warm()

    def _upload_openssh(self, argv, src, size: int, dest: str, progress) -> tuple[int, bytes, bytes] | None:
        """None: ``ssh`` did not log in (paramiko sends this file and the rest)."""
        if self.bulk is None:
            return None
        cmd = shlex.join([*self._become, "timeout", str(UPLOAD_TIMEOUT), *argv])
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
        chan = self._channel(argv, UPLOAD_TIMEOUT)
        sent = 0
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            while sent < size:
                n = src.readinto(view[: min(CHUNK, size - sent)])
                if not n:
                    raise DeployError(f"{dest}: the local file ended early")
                chan.sendall(view[:n])
                sent += n
                if progress:
                    progress(n)
            chan.shutdown_write()
            out, err = _drain(chan)
            return chan.recv_exit_status(), out, err
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as e:
            raise DeployError(
                f"{self.spec.name}: connection lost while uploading {os.path.basename(dest)}: {e}"
            ) from None
        finally:
            _close(chan)


# the board's fastest sha256 as $h (reads stdin, prints the hex digest first): OpenSSL's uses the
# CPU's SHA instructions (the A53's ARMv8 crypto extensions, SHA-NI), several times BusyBox's or
# coreutils' sha256sum, which is the fallback
HASHER = 'if command -v openssl >/dev/null 2>&1; then h="openssl dgst -sha256 -r"; else h=sha256sum; fi; '
# $1 the file: written and hashed in one pass (the digest first on stdout); a failed write (tee goes
# on copying to the hash) is reported on stderr. A background loop flushes the file to the disk
# every second while it arrives, so the sync before the switch finds little left to write.
RECEIVE = HASHER + (
    '( while sleep 1; do sync "$1" || exit 0; done ) </dev/null >/dev/null 2>&1 & f=$!; '
    '{ tee "$1" || echo "q25deploy: writing $1 failed" >&2; } | $h; kill $f 2>/dev/null; :'
)
# each argument (a file) hashed: "<hex> <file>" lines; a file that cannot be read: no line
HASH_FILES = HASHER + 'for f; do d=$($h < "$f") && echo "${d%% *} $f"; done'


def _drain(chan) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()
    while True:
        data = chan.recv(CHUNK)
        if not data:
            break
        out += data
    while chan.recv_stderr_ready() or not chan.exit_status_ready():
        data = chan.recv_stderr(CHUNK)
        if not data:
            break
        err += data
    return bytes(out), bytes(err)
