"""What the command groups share: the help of MODEL, commands with sub-commands of their own, the
power-of-two option type, and warnings about broken plugins.

Nothing here imports more than the standard library: ``q25deploy --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

MODEL_HELP = "a .gguf path or an Ollama reference such as qwen2.5:0.5b"


def add_group(sub, name: str, *, help: str, description: str, what: str):
    """A command with sub-commands of its own (``export tokenizer``, ``runtime build``); returns
    the sub-parsers to add them to. ``what`` is the help of its WHAT argument."""
    parser = sub.add_parser(name, help=help, description=description)
    group = parser.add_subparsers(dest="what", metavar="WHAT", help=what)
    group.required = True
    return group


def positive_pow2(s: str) -> int:
    """argparse type: a power of two of at least 64 (decimal or 0x...)."""
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if v < 64 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"{v} is not a power of two >= 64")
    return v


def report_failures(failures: Iterable) -> None:
    """One warning line on stderr per plugin that failed to load (the command goes on)."""
    for f in failures:
        print(f"q25deploy: warning: {f}", file=sys.stderr)
