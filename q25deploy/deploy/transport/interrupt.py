"""Ctrl-C during a board command: stop every board where it may stop, say where it stopped.

A terminal's Ctrl-C sends SIGINT to its whole foreground process group. Our ``ssh`` children
start in a session of their own (:data:`CHILD`), so that SIGINT reaches this process alone:
a board's session is still there to remove what this run staged, and an ``ssh`` that dies
is never taken for a lost connection. The main thread's KeyboardInterrupt :func:`request`\\ s
the stop: every board's worker meets it at its next check (between the chunks of an upload,
before each board command: :func:`check`) and unwinds, the uploads' ``ssh`` processes are
killed at once (an upload is always before the switch), and a board whose switch has begun
is *shielded*: it completes its switch and the steps that make it safe (load, smoke test,
roll back) and says so. A second Ctrl-C ends the process at once (the next run settles what
it left: an interrupted switch through the intent record, a staging directory by preflight).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future, wait

from ...errors import Interrupted
from .host_result import HostResult

__all__ = [
    "CHILD",
    "Interrupted",
    "check",
    "completed",
    "request",
    "requested",
    "reset",
    "results",
    "stopped",
    "track",
    "untrack",
]

#: keyword arguments of every ``subprocess.Popen`` of an ``ssh``: a terminal's SIGINT is ours
CHILD: dict = {"start_new_session": True}

_stop = threading.Event()
_lock = threading.Lock()
_killable: set[subprocess.Popen] = set()  # the uploads' ssh processes (before any switch)
_children: set[subprocess.Popen] = set()  # every ssh of ours: a second Ctrl-C kills them with us


def requested() -> bool:
    return _stop.is_set()


def check(board=None) -> None:
    """:class:`Interrupted` once a stop was requested, unless ``board`` is shielded (its
    switch has begun, or it is removing what this run staged)."""
    if _stop.is_set() and not getattr(board, "shielded", False):
        raise Interrupted("interrupted")


#: seconds the main thread waits for the boards between two looks at a SIGINT
SLICE = 0.1


def results(futures: list[Future]) -> list:
    """Every future's result, in order, waited for a slice at a time. The kernel may hand a
    process's SIGINT to any of its threads; Python runs the handler in the main thread, and a
    main thread blocked in a wait with no timeout runs it only when that wait ends (the last
    board done: a Ctrl-C during a single board's upload was acted on after the deploy)."""
    pending = set(futures)
    while pending:
        pending = wait(pending, timeout=SLICE).not_done
    return [f.result() for f in futures]


def track(proc: subprocess.Popen, killable: bool = False) -> None:
    """An ``ssh`` of ours (out of the terminal's SIGINT: a second Ctrl-C kills it); ``killable``:
    an upload's, killed as soon as the stop is requested."""
    with _lock:
        _children.add(proc)
        if killable:
            _killable.add(proc)
            if _stop.is_set():
                proc.kill()


def untrack(proc: subprocess.Popen) -> None:
    with _lock:
        _killable.discard(proc)
        _children.discard(proc)


def request(everything: bool = False, message: str = "stopping: Ctrl-C again ends at once") -> None:
    """The first Ctrl-C (from the main thread): stop, kill the uploads (``everything``: every
    ssh of ours, for a command that changes nothing: smoke, status), and make a second SIGINT
    end the process at once with exit 130."""
    _stop.set()
    with _lock:
        for proc in _children if everything else _killable:
            if proc.poll() is None:
                proc.kill()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _at_once)
    sys.stderr.flush()
    os.write(2, f"\nq25deploy: {message}\n".encode())  # one write: not cut by the progress display


def _at_once(signum, frame) -> None:
    try:
        for proc in list(_children):  # no lock: the thread holding it may be the one interrupted
            try:
                proc.kill()
            except OSError:
                pass
        os.write(2, b"\nq25deploy: interrupted again: stopped at once; the next run cleans up what is left\n")
    finally:
        os._exit(130)


def reset() -> None:
    """No stop requested (a command run in-process after another: tests)."""
    _stop.clear()
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _at_once:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def stopped(host: str, action: str):
    """The result of a board Ctrl-C stopped before anything changed on it (status: its dict)."""
    what = {"status": "not read", "smoke": "not tested"}.get(action, "not changed")
    if action == "status":
        return {"host": host, "error": f"interrupted: {what}", "interrupted": True, "state": what}
    error = f"interrupted: not changed ({what})" if action == "smoke" else "interrupted: not changed"
    return HostResult(host, error=error, interrupted=True, state="not changed")


def completed(res, action: str) -> None:
    """``res`` of a board Ctrl-C met past its switch: it completed it (and the steps that make it safe)."""
    if not isinstance(res, HostResult) or res.interrupted:
        return
    res.interrupted, res.state = True, "switched"
    if action == "rollback":
        res.warnings.insert(0, f"switched back to {res.release}: completed the switch before stopping")
    elif res.rolled_back:
        res.state = "rolled back"
        res.warnings.insert(0, f"still on {res.previous}: the switch completed, then rolled back, before stopping")
    else:
        res.warnings.insert(0, f"switched to {res.release}: completed the switch before stopping")
