"""What the command groups share: the MODEL argument (positional or ``--model``), commands with
sub-commands of their own, the power-of-two option type, warnings about broken plugins and the
JSON-or-text result.

Nothing here imports more than the standard library: ``q25deploy --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from functools import partial

MODEL_HELP = "a .gguf path or an Ollama reference such as qwen2.5:0.5b"


def add_group(sub, name: str, *, help: str, description: str, what: str):
    """A command with sub-commands of its own (``export tokenizer``, ``runtime build``); returns
    the sub-parsers to add them to. ``what`` is the help of its WHAT argument."""
    parser = sub.add_parser(name, help=help, description=description)
    group = parser.add_subparsers(dest="what", metavar="WHAT", help=what)
    group.required = True
    return group


def add_model_argument(parser: argparse.ArgumentParser, *, required: bool, default: str = "") -> None:
    """MODEL, given positionally or as ``--model MODEL`` (the same in every command that reads a
    model; both may be given when they agree). ``args.model`` is the one given, or None.
    ``default`` tells what an optional MODEL defaults to."""
    parser.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help=f"{MODEL_HELP} (or give --model MODEL){'; default: ' + default if default else ''}",
    )
    parser.add_argument(
        "--model",
        dest="model_option",
        metavar="MODEL",
        help="MODEL as an option (either form; when both are given they must agree)",
    )
    parser.set_defaults(validate=partial(_merge_model, parser=parser, required=required))


def _merge_model(args: argparse.Namespace, *, parser: argparse.ArgumentParser, required: bool) -> None:
    given, option = args.model, args.model_option
    if given is not None and option is not None and given != option:
        parser.error(f"MODEL {given!r} and --model {option!r} differ: give one")
    args.model = given if given is not None else option
    if args.model is None and required:
        parser.error("the following arguments are required: MODEL")


def validate(args: argparse.Namespace) -> None:
    """Run the checks a command's parser left for after parsing (a usage error exits 2, like
    any other argparse error)."""
    check = getattr(args, "validate", None)
    if check is not None:
        check(args)


def positive_pow2(s: str) -> int:
    """argparse type: a power of two of at least 64 (decimal or 0x...)."""
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if v < 64 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"{v} is not a power of two >= 64")
    return v


def positive_int(s: str) -> int:
    """argparse type: an integer >= 1 (``--jobs``)."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not at least 1")
    return v


def release_number(s: str) -> int:
    """argparse type: 0, 1, 2, ..."""
    if not (s.isascii() and s.isdigit()):
        raise argparse.ArgumentTypeError(f"{s!r} is not a release number (0, 1, 2, ...)")
    return int(s)


def one_line_text(s: str) -> str:
    """argparse type: one line of printable text."""
    if not s.strip() or not s.isprintable():
        raise argparse.ArgumentTypeError(f"{s!r} is not one line of text")
    return s.strip()


def report_failures(failures: Iterable) -> None:
    """One warning line on stderr per plugin that failed to load (the command goes on)."""
    for f in failures:
        print(f"q25deploy: warning: {f}", file=sys.stderr)


def emit(args: argparse.Namespace, obj, text: str) -> int:
    """A command's result: ``obj`` as JSON with ``--json``, else ``text`` for people; exit 0."""
    import json

    print(json.dumps(obj, indent=2, ensure_ascii=False) if args.json else text)
    return 0


def forward_prompts(text: str) -> int | None:
    """``--forward``'s value: a count of smoke prompts, or ``all`` (None)."""
    if text == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"not a count of prompts or 'all': {text!r}")
    return n
