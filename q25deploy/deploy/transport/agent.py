"""One SSH channel that runs every short command of a session on the board.

Opening a session channel and starting a process costs a round trip or two and a login
shell's start-up on the board each time; a deploy runs a few dozen short commands (read
the state, link, switch, write the state, ``q25tok``...). The agent is one ``sh`` on the
board, started once per connection (it is also the board lock's holder, see
:mod:`.boardlock`), that reads one command per line on its standard input and answers each
with a header line and the command's output::

    host  -> board   <command line: argv quoted with shlex, optionally fed by printf '%b' DATA |>
    board -> host    @@q25 <status> <stdout bytes> <stderr bytes>\\n<stdout><stderr>

Commands are argv lists quoted by the host (``shlex.join``) under ``timeout``, exactly as
an exec channel would run them; a command's standard input, when it has one, travels in
the same line as a ``printf '%b'`` argument (every byte escaped: shell builtins of dash and
BusyBox ash both decode it). Only ``sh``, ``mktemp``, ``wc``, ``cat`` and ``rm``: BusyBox
has them all.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Sequence

from ...errors import DeployError
from .boardbase import lost_errors
from .limits import CHUNK, MAX_ANSWER, MAX_LINE, too_large

HEADER = b"@@q25 "
_HEADER = re.compile(rb"@@q25 ([0-9]{1,3}) +([0-9]{1,15}) +([0-9]{1,15}) *")  # status, stdout and stderr bytes
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# serve(): one command per line until standard input ends; q25one: one command (false at the
# end of the input), which the lock holder also answers before it takes the lock (its owners
# check, see boardlock); $t is a private temporary directory (q25tmp). On the way out it also
# calls q25unlock (the lock holder defines it; a no-op otherwise).
SERVE = r"""
q25unlock() { :; }
t=
q25tmp() {
  [ -z "$t" ] || return 0
  t=$(mktemp -d "${TMPDIR:-/tmp}/q25deploy.XXXXXX") || { echo "mktemp failed"; exit 1; }
  trap 'rm -rf "$t"; q25unlock' EXIT
}
q25one() {
  IFS= read -r q25line || return 1
  eval "$q25line" </dev/null >"$t/o" 2>"$t/e"
  q25st=$?
  echo "@@q25 $q25st $(wc -c <"$t/o") $(wc -c <"$t/e")"
  cat "$t/o" "$t/e"
}
serve() {
  q25tmp
  while q25one; do :; done
}
"""
#: an agent that holds no lock (status)
PLAIN = SERVE + "echo ready\nserve\n"


def printf_b(data: bytes) -> str:
    """``data`` as a ``printf '%b'`` argument (unquoted): printable ASCII as is, every other
    byte (and the backslash) escaped, so the argument is one line of plain text."""
    out = []
    for b in data:
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\0{b:03o}")
    return "".join(out)


def command_line(argv: Sequence[str], stdin: bytes, timeout: int) -> bytes:
    """The one line the agent evaluates for ``argv`` (under ``timeout``, fed ``stdin``): an
    argument with a control character (a newline would end the line) is decoded on the board
    from ``printf '%b'`` into a variable first (a trailing ``_`` keeps its final newlines)."""
    words, prelude = ["timeout", str(timeout)], []
    for i, arg in enumerate(argv):
        if _CONTROL.search(arg):
            prelude.append(
                f"q25a{i}=$(printf '%b_' {shlex.quote(printf_b(arg.encode('utf-8')))}); q25a{i}=${{q25a{i}%_}}; "
            )
            words.append(f'"$q25a{i}"')
        else:
            words.append(shlex.quote(arg))
    feed = f"printf '%b' {shlex.quote(printf_b(stdin))} | " if stdin else ""
    return ("".join(prelude) + feed + " ".join(words)).encode("utf-8") + b"\n"


class Agent:
    """The host side of a running agent on ``chan`` (whose script printed its first line)."""

    def __init__(self, name: str, chan) -> None:  # a paramiko Channel, or sshboard.ProcessChannel
        self.name, self.chan = name, chan
        self._buf = bytearray()
        self._mutex = threading.Lock()
        self._broken = False  # a command's answer was not read in full (refused, cut): out of step

    def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            data = self.chan.recv(CHUNK)  # never the length the board announced: it is input
            if not data:
                raise EOFError("the board's agent ended")
            self._buf += data
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _read_line(self) -> bytes:
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE:
                raise too_large(self.name, "line", MAX_LINE)
            data = self.chan.recv(CHUNK)
            if not data:
                raise EOFError("the board's agent ended")
            self._buf += data
        i = self._buf.index(b"\n")
        if i > MAX_LINE:
            raise too_large(self.name, "line", MAX_LINE)
        line = bytes(self._buf[:i])
        del self._buf[: i + 1]
        return line

    def first_line(self) -> str:
        """The script's first line (the lock's answer), before the agent serves."""
        return self._read_line().decode("utf-8", "replace").strip()

    def call(self, argv: Sequence[str], stdin: bytes, timeout: int) -> tuple[int, bytes, bytes]:
        """Run argv on the board; (status, stdout, stderr). A lost agent is a DeployError."""
        with self._mutex:
            if self._broken:
                raise DeployError(f"{self.name}: the board's agent is out of step after an earlier error")
            self._broken = True  # until its answer was read in full: the stream is in step again
            try:
                self.chan.settimeout(timeout + 30)
                self.chan.sendall(command_line(argv, stdin, timeout))
                header = self._read_line()
                m = _HEADER.fullmatch(header)
                if m is None:
                    raise DeployError(f"{self.name}: unexpected answer from the board: {header[:80]!r}")
                status, n_out, n_err = (int(x) for x in m.groups())
                if n_out + n_err > MAX_ANSWER:
                    raise too_large(self.name, f"answer to {argv[0]}", MAX_ANSWER)
                answer = status, self._read_exact(n_out), self._read_exact(n_err)
            except lost_errors() + (ValueError,) as e:
                raise DeployError(f"{self.name}: connection lost during {argv[0]}: {e or 'closed'}") from None
            self._broken = False
            return answer

    def close(self) -> int | None:
        """End the agent (its standard input closes: it cleans up and exits); its status."""
        with self._mutex:
            try:
                if self._broken:  # the board may be blocked writing what was not read: not waited for
                    if hasattr(self.chan, "abort"):
                        self.chan.abort()
                    return None
                self.chan.shutdown_write()
                return self.chan.recv_exit_status()
            except lost_errors():
                return None  # a dead connection: the board side sees it end
            finally:
                try:
                    self.chan.close()
                except lost_errors():
                    pass
