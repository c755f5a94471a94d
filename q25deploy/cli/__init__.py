"""The ``q25deploy`` command line: ``main`` (the top-level parser, the exit codes and the one place
errors become messages) and one module per command group, each adding its own sub-parsers
(``add_commands``) and holding its handlers: ``models``, ``tokens``, ``build``, ``runtime``,
``deploy``; ``common`` holds what they share.

Exports ``main`` (returns the exit code: for tests and callers) and ``run`` (the program, which
starts a build's copy before it loads the rest: :mod:`.early_build`; a board command's first
logins start once the command line is parsed: :mod:`.early`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from .main import main


def run() -> NoReturn:
    """The ``q25deploy`` program (console script, ``python -m q25deploy``)."""
    from ..numerics import pin

    pin()  # before numpy loads: OpenBLAS's kernels and threads (q25deploy/numerics.py)
    from .early_build import begin_build

    head_start = begin_build(sys.argv[1:])  # a build's copy, under way while the rest loads
    from .main import run as run_main

    run_main(head_start)


def __getattr__(name: str):
    if name == "main":  # loaded on first use, so that a build's copy can start first
        from .main import main as f

        globals()["main"] = f  # (importing .main bound the submodule to this name)
        return f
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["main", "run"]
