"""Where a command's time goes, for benchmarks: ``Q25_PHASE_TIMES=FILE`` makes the command
write, when it ends, one JSON object mapping each phase it passed to the ``time.monotonic()``
of the phase's end (the system-wide monotonic clock: the caller subtracts its own reading
taken before it started the process, so interpreter start-up is counted too).

Phases: ``imports`` (the command's modules loaded, plugins and build read), ``login``,
``lock`` (the board lock taken and its state read), ``transfer``, ``flush`` (the staged
release synced and renamed), ``switch``, ``load``, ``smoke``, ``verify`` (status: the regions read back), ``end``;
``build``: ``imports`` (up to the up-to-date check), ``plan``, ``tokenizer``, ``payload``,
``board files``, ``layer``, ``probe``, ``commit`` (the output directory swapped in), ``end``. With several boards
the first board to pass a phase sets it. Costs a dictionary write per phase; nothing without
the variable."""

from __future__ import annotations

import json
import os
import time

_ENV = "Q25_PHASE_TIMES"
_marks: dict[str, float] = {}


def mark(phase: str) -> None:
    """``phase`` ended now (the first call for a phase counts)."""
    _marks.setdefault(phase, time.monotonic())


def write() -> None:
    """Write the marks to ``$Q25_PHASE_TIMES`` (:func:`~q25deploy.common.write_atomic`), if set."""
    path = os.environ.get(_ENV)
    if not path:
        return
    mark("end")
    from .common import write_atomic

    write_atomic(path, json.dumps(_marks).encode("ascii"), sync=False)
