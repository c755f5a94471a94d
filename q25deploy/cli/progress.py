"""Progress lines on stderr, only when stderr is a terminal (scripts and CI see nothing).

One line, rewritten in place; :func:`clear` wipes it, and the CLI calls it before printing
an error so the message never lands at the end of a half-written progress line."""

from __future__ import annotations

import sys
import threading
import time

_showing = False  # a progress line is on the terminal, without its newline


def clear() -> None:
    """Wipe the progress line, if one is showing."""
    global _showing
    if _showing:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
        _showing = False


class Progress:
    """``step`` shows what is being done; ``sent(host, n)`` counts bytes per host (threads may
    call both): the line then shows every host's bytes and rate, one field per host, so
    boards deployed in parallel (``--jobs``) do not overwrite each other's progress."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._t0 = time.monotonic()
        self._mutex = threading.Lock()
        self._hosts: dict[str, list[float]] = {}  # host -> [bytes, first byte time]
        self._text, self._shown_at = "", 0.0

    def step(self, text: str) -> None:
        with self._mutex:
            self._text = text
            self._show(force=True)

    def sent(self, host: str, n: int) -> None:
        with self._mutex:
            entry = self._hosts.setdefault(host, [0, time.monotonic()])
            entry[0] += n
            self._show(force=False)

    def _show(self, force: bool) -> None:
        global _showing
        now = time.monotonic()
        if not self.enabled or (not force and now - self._shown_at < 0.2):
            return
        self._shown_at = now
        fields = [
            f"{h} {b / 1e6:,.1f} MB {b / 1e6 / max(now - t, 1e-3):,.1f} MB/s" for h, (b, t) in self._hosts.items()
        ]
        line = " | ".join(fields) if fields and not force else self._text
        sys.stderr.write(f"\r\033[K[{now - self._t0:6.1f}s] {line}"[:240])
        sys.stderr.flush()
        _showing = True

    def done(self) -> None:
        clear()
