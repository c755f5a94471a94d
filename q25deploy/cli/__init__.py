"""The ``q25deploy`` command line: the parser and the one map of errors to exit codes (``main``),
and one module of handlers per command group.

Exports ``main``."""

from .main import main

__all__ = ["main"]
