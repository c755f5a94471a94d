"""Live progress on stderr, only when both stdout and stderr are a terminal (a pipe, a script
and CI see nothing; ``--json`` and ``--quiet`` turn it off): the lines of
:func:`.progress_view.render` redrawn in place, then one summary line.

Thin I/O only: the state is :class:`.progress_view.Task` records, updated from the worker
threads under one lock. :func:`clear` wipes what is shown; the CLI calls it before printing
an error, so the message never lands inside the progress lines."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .progress_view import Task, render, summary

REFRESH = 0.1  # at most this often on bytes and phases; the ticker redraws every TICK
TICK = 0.5
MAX_HEIGHT = 20

_shown: list = [0, None]  # [lines on the terminal now, their stream]
_live: list = []  # the displays whose ticker runs


def stop() -> None:
    """End every display (a command failed: its error comes next) and wipe the lines."""
    while _live:
        _live.pop()._halt()
    clear()


def clear() -> None:
    """Wipe the progress lines, if any are showing."""
    n, stream = _shown
    if n and stream is not None:
        stream.write("\r" + (f"\033[{n - 1}A" if n > 1 else "") + "\033[J")
        stream.flush()
    _shown[:] = [0, None]


def terminal_size(stream: TextIO) -> os.terminal_size:
    """The size of the terminal the lines go to (that stream's, not stdout's), else 100x24."""
    try:
        return os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size((100, 24))


def wanted(quiet: bool = False, json: bool = False) -> bool:
    """Whether to show progress: a person watching (both streams a terminal), not silenced."""
    return not quiet and not json and sys.stderr.isatty() and sys.stdout.isatty()


class Progress:
    """``phase(name, text)``, ``total(name, n)``, ``file(name, rel, size)``, ``sent(name, n,
    rel)``, ``file_done(name, rel)``, ``finish(name, ok)`` per board (any thread); ``step(text)`` is the phase of the single task named ``task``;
    ``done(verb)`` wipes the lines and, with ``verb``, leaves the summary."""

    def __init__(self, enabled: bool | None = None, task: str = "", stream: TextIO | None = None) -> None:
        self.enabled = wanted() if enabled is None else enabled
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.tasks: dict[str, Task] = {}
        self.task = task
        self._mutex = threading.Lock()
        self._drawn = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.enabled:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
            _live.append(self)

    def add(self, *names: str) -> None:
        """The boards, in the order to show them (before their first phase)."""
        with self._mutex:
            for name in names:
                self.tasks.setdefault(name, Task(name))

    def _get(self, name: str) -> Task:
        return self.tasks.setdefault(name, Task(name))

    def phase(self, name: str, text: str) -> None:
        with self._mutex:
            t = self._get(name)
            t.phase = text
            if t.began is None:
                t.began = time.monotonic()
            self._draw(force=False)

    def step(self, text: str) -> None:
        self.phase(self.task or "working", text)

    def total(self, name: str, n: int) -> None:
        with self._mutex:
            self._get(name).total += n

    def sent(self, name: str, n: int, rel: str | None = None) -> None:
        """``n`` more bytes out (of the file ``rel``, when one is named)."""
        with self._mutex:
            self._get(name).add_bytes(time.monotonic(), n, rel)
            self._draw(force=False)

    def file(self, name: str, rel: str, size: int) -> None:
        """A file of ``size`` bytes on its way (its bytes: ``sent(name, n, rel)``)."""
        with self._mutex:
            self._get(name).start_file(rel, size)
            self._draw(force=False)

    def file_done(self, name: str, rel: str) -> None:
        """The board has the file (written, hashed, answered)."""
        with self._mutex:
            self._get(name).end_file(rel)
            self._draw(force=False)

    def finish(self, name: str, ok: bool) -> None:
        with self._mutex:
            t = self._get(name)
            t.ended, t.ok = time.monotonic(), ok
            self._draw(force=True)

    def _halt(self) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with self._mutex:
                self._draw(force=True)

    def _draw(self, force: bool) -> None:
        now = time.monotonic()
        if not self.enabled or not self.tasks or (not force and now - self._drawn < REFRESH):
            return
        self._drawn = now
        size = terminal_size(self.stream)
        lines = render(
            list(self.tasks.values()), now, self.t0, width=size.columns, height=min(MAX_HEIGHT, size.lines - 2)
        )
        clear_then = "\r" + (f"\033[{_shown[0] - 1}A" if _shown[0] > 1 else "") + "\033[J" if _shown[0] else ""
        self.stream.write(clear_then + "\n".join(lines))
        self.stream.flush()
        _shown[:] = [len(lines), self.stream]

    @contextmanager
    def running(self, verb: str) -> Iterator[Progress]:
        """Progress around a command's work: its summary when the work returns, the lines wiped
        when it raises (the error is what the person reads)."""
        try:
            yield self
        except BaseException:
            self.done()
            raise
        self.done(verb)

    def done(self, verb: str = "") -> None:
        """Stop: the last frame (every board at its end) stays, and with ``verb`` (``deploy``,
        ``build``, ...) the summary line under it; without, the lines are wiped."""
        self._halt()
        if self in _live:
            _live.remove(self)
        if not self.enabled:
            return
        with self._mutex:
            for t in self.tasks.values():
                if t.ended is None:
                    t.ended, t.ok = time.monotonic(), True if t.ok is None else t.ok
            if not verb:
                clear()
                return
            self._draw(force=True)
            if self.tasks:
                self.stream.write("\n" + summary(verb, list(self.tasks.values()), time.monotonic(), self.t0) + "\n")
                self.stream.flush()
            _shown[:] = [0, None]
