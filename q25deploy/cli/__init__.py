"""The ``q25deploy`` command line: ``main`` (the top-level parser, the exit codes and the one place
errors become messages) and one module per command group, each adding its own sub-parsers
(``add_commands``) and holding its handlers: ``models``, ``tokens``, ``build``, ``runtime``,
``deploy``; ``common`` holds what they share.

Exports ``main``."""

from .main import main

__all__ = ["main"]
