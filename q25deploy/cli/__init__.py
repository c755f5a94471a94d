"""The ``q25deploy`` command line: ``main`` (the top-level parser, the exit codes and the one place
errors become messages) and one module per command group, each adding its own sub-parsers
(``add_commands``) and holding its handlers: ``models``, ``tokens``, ``build``, ``runtime``,
``deploy``; ``common`` holds what they share.

Exports ``main`` (returns the exit code: for tests and callers) and ``run`` (the program)."""

from .main import main, run

__all__ = ["main", "run"]
