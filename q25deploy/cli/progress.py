"""Progress lines on stderr, only when stderr is a terminal (scripts and CI see nothing)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._t0 = time.monotonic()

    def step(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[K[{time.monotonic() - self._t0:6.1f}s] {text}")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
