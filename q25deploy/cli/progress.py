"""Progress lines on stderr, only when stderr is a terminal (scripts and CI see nothing).

One line, rewritten in place; :func:`clear` wipes it, and the CLI calls it before printing
an error so the message never lands at the end of a half-written progress line."""

from __future__ import annotations

import sys
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
    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._t0 = time.monotonic()

    def step(self, text: str) -> None:
        global _showing
        if self.enabled:
            sys.stderr.write(f"\r\033[K[{time.monotonic() - self._t0:6.1f}s] {text}")
            sys.stderr.flush()
            _showing = True

    def done(self) -> None:
        clear()
