"""One q25deploy at a time on a board: a lock held by a board-side process for as long as the
SSH connection that took it lives.

The lock is a symlink ``<install>/.q25deploy.lock`` whose target names its holder
(``q25deploy-lock:PID:SINCE:BOOT:OWNER``, BOOT the start of the board's boot id): ``ln -s`` creates it atomically with that record, where
a ``mkdir`` lock would be ownerless between the ``mkdir`` and the write of the owner. PID is
a shell on the board that waits on the connection (``cat`` of its standard input) and removes
the lock when the connection ends, cleanly or cut. A lock is stale, and is taken over, when
that process is gone (``/proc/PID``, or ``kill -0`` where there is no /proc), the board
booted since (another boot id: the PID may be reused), or it is older than
:data:`LOCK_MAX_AGE` seconds (the holder is killed then). A second deploy waits up to :data:`LOCK_WAIT` seconds,
then fails with the holder's name. Only ``sh``, ``ln``, ``readlink``, ``rm``, ``cut``,
``date``, ``kill`` and ``cat``: BusyBox has them all.
"""

from __future__ import annotations

import getpass
import re
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ...errors import DeployError
from ..transport.agent import PLAIN, SERVE, Agent
from ..transport.become import hint as become_hint
from ..transport.boardbase import COMMAND_TIMEOUT, BoardSession, lost_errors
from ..transport.openssh import last_line

LOCK_NAME = ".q25deploy.lock"
LOCK_WAIT = 120  # seconds a deploy waits for another one on the same board
LOCK_MAX_AGE = 6 * 3600  # seconds: the longest a deploy may hold a board (then the lock is stale)
BUSY = 75  # the board script's status when the lock is held by someone else (EX_TEMPFAIL)
#: what runs before the lock is taken: called with a ``run(argv) -> (status, stdout, stderr)``
First = Callable[[Callable[[Sequence[str]], tuple[int, bytes, bytes]]], None]

# $1 lock path, $2 owner, $3 max age, $4 "ask": first prints "ready", answers one command (as
# the agent does) and goes on only when the next line is "go" (the owners check: before the lock
# makes anything); prints "acquired" and serves commands (the agent) until stdin closes, then
# removes the lock; or exits BUSY
HOLD = (
    SERVE
    + r"""lock=$1; owner=$2; max=$3
if [ "$4" = ask ]; then q25tmp; echo ready; q25one && IFS= read -r q25go && [ "$q25go" = go ] || exit 1; fi
if [ ! -d "${lock%/*}" ]; then (umask 022 && mkdir -p "${lock%/*}") && chmod 0755 "${lock%/*}" || exit 1; fi  # the install dir and the way to it: 0755 (root's alone, see owners.py)
boot=$(cut -c1-8 /proc/sys/kernel/random/boot_id 2>/dev/null)
now=$(date +%s); me="q25deploy-lock:$$:$now:$boot:$owner"
if ln -s "$me" "$lock" 2>/dev/null; then
  echo acquired
  q25unlock() { [ "$(readlink "$lock")" = "$me" ] && rm -f "$lock"; }
  serve
  exit 0
fi
cur=$(readlink "$lock") || exit 75
pid=$(echo "$cur" | cut -d: -f2); since=$(echo "$cur" | cut -d: -f3); held=$(echo "$cur" | cut -d: -f4); stale=0
case "$pid:$since" in *[!0-9:]*|:*|*:|*:?????????????*) stale=1 ;; esac  # malformed (a SINCE of 13+ digits too)
if [ $stale = 0 ] && [ -n "$boot" ] && [ "$held" != "$boot" ]; then stale=1; fi
if [ $stale = 0 ] && [ ! -d "/proc/$pid" ]; then
  if [ -d /proc/self ] || ! kill -0 "$pid" 2>/dev/null; then stale=1; fi
fi
if [ $stale = 0 ] && [ $((now - since)) -gt "$max" ]; then stale=1; fi
if [ $stale = 1 ] && [ "$(readlink "$lock")" = "$cur" ]; then rm -f "$lock"; echo "stale $cur"; exit 75; fi
echo "busy $cur"; exit 75
"""
)


def owner() -> str:
    """Who takes the lock, as the board's record shows it: user@workstation."""
    try:
        who = f"{getpass.getuser()}@{socket.gethostname()}"
    except (OSError, KeyError):
        who = "unknown"
    return re.sub(r"[^A-Za-z0-9@._-]", "_", who)[:80]


def _last_error_line(chan) -> str:
    """The last line the board wrote to stderr (already received: the command has exited)."""
    data = b""
    while chan.recv_stderr_ready():
        data += chan.recv_stderr(4096)
    return last_line(data).strip() or "no output"


def _describe(record: str) -> str:
    """The holder of a lock record for people (the record is the board's: any text)."""
    parts = record.split(":", 4)
    if len(parts) == 5 and parts[2].isascii() and parts[2].isdigit() and len(parts[2]) <= 12:
        try:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(parts[2])))
        except (OverflowError, OSError, ValueError):  # a time this platform cannot show
            when = f"{parts[2]} (seconds since 1970)"
        return f"{parts[4]} (board pid {parts[1]}) since {when}"
    return repr(record)


@contextmanager
def board_lock(
    board: BoardSession, path: str, *, wait: float = LOCK_WAIT, first: First | None = None
) -> Iterator[None]:
    """Hold the board's lock at ``path`` for the duration of the block; its holder is the
    session's agent (every ``board.run`` of the block goes through it). ``first(run)`` is called
    before each attempt to take the lock, with a ``run(argv)`` (status, stdout, stderr) through
    the holder's own shell: raising refuses the board, and the holder ends having made nothing."""
    deadline = time.monotonic() + wait
    argv = ["sh", "-c", HOLD, "sh", path, owner(), str(LOCK_MAX_AGE), *(["ask"] if first else [])]
    while True:
        agent = Agent(board.spec.name, board.start(argv, LOCK_MAX_AGE))
        try:
            if first is not None:
                _ask(board, agent, first, path)
            line = agent.first_line()
        except EOFError:
            line = ""  # the script ended first (its status says why)
        except lost_errors() as e:
            agent.close()
            raise DeployError(f"{board.spec.name}: connection lost while taking the board lock: {e}") from None
        if line == "acquired":
            break
        status = agent.chan.recv_exit_status()
        said = line or _last_error_line(agent.chan)
        agent.close()
        if status != BUSY:
            raise DeployError(
                f"{board.spec.name}: cannot take the board lock {path} ({status}: {said})"
                + become_hint(board.spec.user, board.become, said)
            )  # not root, no --become: say so
        if line.startswith("busy ") and time.monotonic() >= deadline:
            raise DeployError(
                f"{board.spec.name}: busy: another deploy holds {path}: {_describe(line[5:])}; "
                f"waited {wait:g} s, nothing was changed"
            )
        if line.startswith("busy "):
            time.sleep(1.0)
    with board.attached(agent):
        yield


def _ask(board: BoardSession, agent: Agent, first: First, path: str) -> None:
    """The holder's one command before the lock, then "go"; the agent is closed if ``first`` refuses."""
    try:
        try:
            ready = agent.first_line()
        except EOFError:  # the script ended first: its last error line says why
            agent.chan.recv_exit_status()
            ready = _last_error_line(agent.chan)
        if ready != "ready":
            raise DeployError(
                f"{board.spec.name}: cannot take the board lock {path} ({ready[:80] or 'its shell ended'})"
                + become_hint(board.spec.user, board.become, ready)
            )
        first(lambda argv: agent.call(argv, b"", COMMAND_TIMEOUT))
        agent.chan.sendall(b"go\n")
    except lost_errors() as e:
        agent.close()
        raise DeployError(f"{board.spec.name}: connection lost before taking the board lock: {e or 'closed'}") from None
    except BaseException:
        agent.close()  # its standard input ends: the holder exits before the lock
        raise


@contextmanager
def board_session(board: BoardSession) -> Iterator[None]:
    """Every ``board.run`` of the block through one agent, without the lock (read-only work)."""
    take = getattr(board, "take_agent", None)  # the session's own shell, where it runs one
    chan = (take() if take else None) or board.start(["sh", "-c", PLAIN, "sh"], LOCK_MAX_AGE)
    agent = Agent(board.spec.name, chan)
    try:
        line = agent.first_line()
    except lost_errors() as e:
        agent.close()
        raise DeployError(f"{board.spec.name}: cannot start a shell on the board: {e or 'it ended'}") from None
    if line != "ready":
        agent.close()
        raise DeployError(f"{board.spec.name}: the board's shell did not start ({line[:80] or 'no output'})")
    with board.attached(agent):
        yield
