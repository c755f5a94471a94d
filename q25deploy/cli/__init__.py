"""The ``q25deploy`` command line: :mod:`.app` (the one parser, the exit codes and the one
place errors become messages) and one module per command group, each adding its own
sub-parsers (``add_commands``) and holding its handlers: ``models``, ``tokens``, ``build``,
``runtime``, ``deploy``, ``package``; ``common`` holds what they share.

Exports ``main`` (returns the exit code: for tests and callers) and ``run`` (the program: the
console script and ``python -m q25deploy``). No submodule is called ``main`` or ``run``, so
each name means the function whatever was imported before."""

from __future__ import annotations

from typing import NoReturn

from .app import main


def run() -> NoReturn:
    """The ``q25deploy`` program (console script, ``python -m q25deploy``)."""
    from ..numerics import pin

    pin()  # before numpy loads: OpenBLAS's kernels and threads (q25deploy/numerics.py)
    from .app import run as run_app

    run_app()


__all__ = ["main", "run"]
