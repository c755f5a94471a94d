"""What every board session shares, whichever SSH client carries it (paramiko in
:mod:`.connection`, OpenSSH's ``ssh`` in :mod:`.sshboard`): the board-side shell snippets,
running a command (through the session's agent, else a channel of its own) and its failure
message. Standard library only: a command that ends up on OpenSSH never imports paramiko."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ...errors import DeployError, HostKeyError, UsageError
from . import interrupt
from .become import hint as become_hint
from .become import prefix as become_prefix
from .hosts import HostSpec
from .openssh import last_line

COMMAND_TIMEOUT = 120
UPLOAD_TIMEOUT = 3600

# the board's fastest sha256 as $h (reads stdin, prints the hex digest first): OpenSSL's uses the
# CPU's SHA instructions (the A53's ARMv8 crypto extensions, SHA-NI), several times BusyBox's or
# coreutils' sha256sum, which is the fallback
HASHER = 'if command -v openssl >/dev/null 2>&1; then h="openssl dgst -sha256 -r"; else h=sha256sum; fi; '
# As root, the shell cannot open a file O_EXCL|O_NOFOLLOW|O_NONBLOCK, so $1 is written only
# from inside its directory, entered with cd -P and checked as entered: its real path the one
# given (no link on the way, none swapped in: the deploy user owns releases/), root's and
# writable by no one else (nobody can put anything in it from then on), and nothing at $1 yet
# (no file, link or FIFO to write through or wait on). Then tee creates a new file there, as
# `q25tok receive` would. Else the input is drained, one line says why, exit 10 (as q25tok's).
ROOT_TARGET = (
    'p=$1; if [ "$(id -u)" = 0 ]; then d=${1%/*}; d=${d:-/}; '
    'cd -P -- "$d" 2>/dev/null && [ "$(pwd -P)" = "$d" ] && [ -O . ] && '
    "case $(ls -ldn .) in ?????w*|????????w*) false ;; esac && "
    '[ ! -e "${1##*/}" ] && [ ! -L "${1##*/}" ] || { cat >/dev/null; echo "q25deploy: refusing to write $1 as '
    "root: its directory must be root's, writable by no one else and reached without a link, and nothing may be "
    'there yet" >&2; exit 10; }; set -- "${1##*/}"; fi; '
)
# $1 the file: written and hashed in one pass (the digest first on stdout); a failed write (tee goes
# on copying to the hash) is reported on stderr. A background loop flushes the file to the disk
# every second while it arrives, so the sync before the switch finds little left to write. The
# file is 0644 whatever the login's umask (as q25tok receive makes it).
RECEIVE = (
    HASHER
    + ROOT_TARGET
    + (
        'umask 022; ( while sleep 1; do sync "$1" || exit 0; done ) </dev/null >/dev/null 2>&1 & f=$!; '
        '{ tee "$1" || echo "q25deploy: writing $p failed" >&2; } | $h; kill $f 2>/dev/null; :'
    )
)
# each argument (a file) hashed: "<hex> <file>" lines; a file that cannot be read: no line
HASH_FILES = HASHER + 'for f; do d=$($h < "$f") && echo "${d%% *} $f"; done'


def lost_errors() -> tuple[type[BaseException], ...]:
    """What a channel raises when the connection under it is gone: OS errors, and paramiko's
    when paramiko carries the session (looked up, not imported: it may not be loaded at all)."""
    paramiko = sys.modules.get("paramiko")
    return (TimeoutError, OSError, EOFError) + ((paramiko.SSHException,) if paramiko is not None else ())


def known_hosts_path(known_hosts: str | None) -> Path:
    """The known_hosts file a session checks: ``known_hosts`` (``~`` expanded), else the user's;
    a ``~user`` that names nobody (or no home) is a usage error."""
    try:
        return Path(known_hosts).expanduser() if known_hosts else Path("~/.ssh/known_hosts").expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        raise UsageError(
            f"--known-hosts {known_hosts or '~/.ssh/known_hosts'}: no such user's home directory to expand ~ to"
        ) from None


def changed_key(spec: HostSpec, known_hosts: str) -> HostKeyError:
    return HostKeyError(
        f"{spec.name}: the host key CHANGED since it was recorded in {known_hosts}; refusing "
        "(remove the old entry only if you know why it changed)"
    )


def unknown_key(spec: HostSpec, known_hosts: str) -> HostKeyError:
    return HostKeyError(
        f"{spec.name}: unknown host key (not in {known_hosts}); check it and pass --trust-new-host to record it"
    )


class BoardSession:
    """A connected board (a context manager); subclasses open channels (``start``, ``_exec``)
    and send files (``upload``, ``expect_upload``)."""

    def __init__(self, spec: HostSpec, *, become: str, transfer: str) -> None:
        self.spec, self.transfer = spec, transfer
        self.become, self._become = become, become_prefix(become)  # sudo -n / doas -n for a login that is not root
        self.notes: list[str] = []  # what the user should know about this session (a fallback)
        self.agent = None  # the session's agent (see attached)
        self.receiver: str | None = None  # a q25tok that receives uploads (see receiver.py), else the shell's
        # Ctrl-C (see interrupt.py): True once this board's switch has begun (it completes), or while
        # it removes what the run staged; its commands then run whatever was requested
        self.shielded = False

    def command(self, argv: Sequence[str], timeout: int) -> str:
        """argv as the board's shell line: quoted, under ``timeout``, behind sudo/doas."""
        return shlex.join([*self._become, "timeout", str(timeout), *argv])

    def receive_argv(self, dest: str) -> list[str]:
        """What writes and hashes an upload into ``dest`` (see :mod:`.receiver`)."""
        return [self.receiver, "receive", dest] if self.receiver else ["sh", "-c", RECEIVE, "sh", dest]

    @contextmanager
    def attached(self, agent):
        """Run every command of the block through ``agent``; it is closed afterwards."""
        self.agent = agent
        try:
            yield agent
        finally:
            self.agent = None
            agent.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def start(self, argv: Sequence[str], timeout: int):
        """Start argv on the board (quoted, under ``timeout``) and return its open channel: for a
        command that lives as long as the caller needs it (the board lock, the agent)."""
        raise NotImplementedError

    def upload(self, src: BinaryIO, size: int, dest: str, progress=None) -> str:
        raise NotImplementedError

    def expect_upload(self, size: int) -> None:
        """A file of ``size`` bytes is coming: log in what will carry it now."""

    def digest(self, dest: str, status: int, out: bytes, err: bytes, *, err_fails: bool) -> str:
        """The board's sha256 of an upload from its receiver's answer; ``err_fails``: anything on
        stderr is a failed write (the shell's receiver says so there)."""
        words = out.split()
        if status != 0 or (err and err_fails) or not words:
            last = last_line(err or out) or "no output"
            raise DeployError(f"{self.spec.name}: writing {dest} failed ({status}: {last})")
        return words[0].decode("ascii", "replace")

    def _exec(self, argv: Sequence[str], stdin: bytes, timeout: int) -> tuple[int, bytes, bytes]:
        raise NotImplementedError

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: int = COMMAND_TIMEOUT, check: bool = True
    ) -> tuple[int, bytes, bytes]:
        """Run argv on the board (quoted, under ``timeout``); returns (status, stdout, stderr)."""
        interrupt.check(self)  # Ctrl-C: no further command, unless the board is shielded
        if self.agent is not None:
            status, out, err = self.agent.call(argv, stdin, timeout)
        else:
            status, out, err = self._exec(argv, stdin, timeout)
        if check and status != 0:
            last = last_line(err or out) or "no output"
            raise DeployError(
                f"{self.spec.name}: {shlex.join(argv)[:120]} failed ({status}): "
                f"{last}{become_hint(self.spec.user, self.become, last)}"
            )
        return status, out, err
