"""The ``q25deploy`` command line: the top-level parser, the exit codes and ``main``.

Each command group (``models``, ``build``, ``deploy``, ``tokens``, ``runtime``) adds its own
sub-parsers and handlers. This is the one place where errors become messages and exit codes
(``EXIT_CODES``, ``EXIT_MEANINGS``; documented in docs/commands.md). Library code raises
:class:`~q25deploy.errors.Q25Error` subclasses and never prints or exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

from .. import __version__, phases
from ..common import printable
from ..errors import (
    BoardFileError,
    CodecError,
    DeployError,
    FitError,
    GGUFError,
    ImageError,
    Interrupted,
    LicenseError,
    ModelSourceError,
    OutputError,
    PluginError,
    Q25Error,
    TokenizerError,
    ToolError,
    UnknownTargetError,
    UsageError,
)
from . import build, deploy, models, package, progress, runtime, tokens
from .common import validate

#: the command groups, each a module with ``add_commands(subparsers)`` and its handlers, in the
#: order ``--help`` lists them
COMMAND_GROUPS = (models, build, deploy, package, tokens, runtime)

#: exit code → meaning: the one table behind the epilog of ``--help`` and docs/commands.md's
#: "Exit codes" (tests/cli/test_exit_codes.py compares the three)
EXIT_MEANINGS: dict[int, str] = {
    0: "success",
    1: "other error the user can act on",
    2: "usage: bad option, argument or value; unknown target",
    3: "model source: no Ollama store, unknown model, missing blob, size or digest mismatch",
    4: "not a valid GGUF (bad magic, truncated, absurd counts, data out of range, unknown type, ...)",
    5: "tokenizer missing or not supported (byte-level BPE with the qwen2 pre-tokenizer is)",
    6: "bad runtime image (magic, version, checksum, bounds)",
    7: "bad token id, or text that cannot be encoded",
    8: "cannot write the output",
    9: "a system tool is missing or failed (compiler, ...)",
    10: "the model does not fit the board's memory",
    11: "bad board file",
    12: "the model's licence is unknown (for the layer's recipe)",
    13: "a board failed (deploy, smoke, rollback, status); the other boards are unaffected",
    14: "a board plugin's hook failed (the message names the plugin, the hook and the target)",
    70: "internal error (a bug in q25deploy or in a plugin; Q25DEPLOY_DEBUG=1 shows the traceback)",
    130: "interrupted",
}

#: error class → exit code; the first matching class (in this order) wins
EXIT_CODES: list[tuple[type[Q25Error], int]] = [
    (UsageError, 2),
    (ModelSourceError, 3),
    (GGUFError, 4),
    (TokenizerError, 5),
    (ImageError, 6),
    (CodecError, 7),
    (OutputError, 8),
    (ToolError, 9),
    (FitError, 10),
    (BoardFileError, 11),
    (LicenseError, 12),
    (DeployError, 13),
    (PluginError, 14),
    (UnknownTargetError, 2),
    (Interrupted, 130),
    (Q25Error, 1),
]
EXIT_INTERNAL = 70  # a bug: an unexpected exception (EX_SOFTWARE)
EXIT_INTERRUPTED = 130


def epilog() -> str:
    """The text under ``q25deploy --help``: what MODEL is, and every exit code."""
    lines = [
        "MODEL is a path to a .gguf file or an Ollama reference such as qwen2.5:0.5b",
        "(looked up in $OLLAMA_MODELS or ~/.ollama/models); every command that reads a model",
        "takes it positionally or as --model MODEL.",
        "",
        "exit codes:",
    ]
    for code, meaning in EXIT_MEANINGS.items():
        lines += textwrap.wrap(
            meaning, 79, initial_indent=f"  {code:>3}  ", subsequent_indent=" " * 7, break_on_hyphens=False
        )
    return "\n".join(lines) + "\n"


def build_parser(plugin_commands: bool = True) -> argparse.ArgumentParser:
    """The whole command line; with ``plugin_commands`` also the commands plugins add (which
    loads every plugin: see :func:`wants_plugin_commands`)."""
    p = argparse.ArgumentParser(
        prog="q25deploy",
        description="Take a Qwen2.5 model (GGUF file or Ollama model) onto Zynq UltraScale+ boards.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"q25deploy {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", help="what to do (q25deploy COMMAND --help tells more)")
    sub.required = True
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    if plugin_commands:
        from .plugin_commands import add_plugin_commands

        add_plugin_commands(sub, p.prog)
    return p


def core_commands() -> frozenset[str]:
    """The command words the core itself has."""
    return frozenset(_choices(build_parser(plugin_commands=False)))


def _choices(parser: argparse.ArgumentParser) -> dict:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def wants_plugin_commands(argv: Sequence[str], core: Iterable[str] | None = None) -> bool:
    """Whether parsing ``argv`` needs the plugins' commands: the command word is not a core
    command (``core``, default :func:`core_commands`: a plugin's, or a typo whose error lists
    them all), or it is the top-level help. A core command never loads plugins to parse
    (start-up time)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None:
        return "-h" in argv or "--help" in argv
    return word not in (core_commands() if core is None else frozenset(core))


def _suggest_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A mistyped command word: a usage error (exit 2) that names the nearest command."""
    import difflib

    word = next((a for a in argv if not a.startswith("-")), None)
    choices = list(_choices(parser))
    if word is not None and word not in choices:
        close = difflib.get_close_matches(word, choices, n=1)
        if close:
            parser.error(f"unknown command {printable(word)!r}: did you mean {close[0]!r}?")


def exit_code_for(err: Q25Error) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(err, cls):
            return code
    return 1


def _one_line(text: str) -> str:
    """A message on one line, its control characters shown as ``\\xNN`` (a board's or a model's
    text may carry escape sequences)."""
    return printable(" ".join(str(text).split()))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default ``sys.argv[1:]``); returns its exit code."""
    try:
        return _main(argv)
    finally:
        if "q25deploy.deploy.ops.options" in sys.modules:  # the hosts files it read: read once per command
            sys.modules["q25deploy.deploy.ops.options"].forget_hosts_files()
        phases.write()  # Q25_PHASE_TIMES (benchmarks): where the time went


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(plugin_commands=False)  # built once for a core command: building one is not free
    if wants_plugin_commands(argv, _choices(parser)):
        parser = build_parser(plugin_commands=True)
        _suggest_command(parser, argv)
    args = parser.parse_args(argv)  # the one parse: nothing starts before it (no copy, no login)
    validate(args)  # usage errors argparse cannot see (MODEL and --model differ): exit 2
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except Q25Error as e:
        return _report(f"error: {_one_line(str(e))}", exit_code_for(e))
    except KeyboardInterrupt:
        return _report("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug, not bad input: one line, full trace only on request
        if os.environ.get("Q25DEPLOY_DEBUG"):
            raise
        plugin = getattr(func, "plugin", None)  # a plugin's command: name the plugin
        where = f"plugin {plugin!r} failed in {args.command!r}" if plugin else "internal error"
        return _report(
            f"{where}: {type(e).__name__}: {_one_line(str(e))} (set Q25DEPLOY_DEBUG=1 for a traceback)", EXIT_INTERNAL
        )


def run() -> NoReturn:
    """The ``q25deploy`` program (console script, ``python -m q25deploy``): :func:`main`,
    then out without tearing the interpreter down. Every file the command wrote is closed by
    then and every board session ended; what is left is freeing a few thousand objects and modules one
    by one (fabric, paramiko, cryptography), a noticeable part of a quick command such as ``status``."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError):  # a reader that went away: nothing more to say
            pass
    os._exit(code)


def _report(message: str, code: int) -> int:
    """The one line a failed command prints (on a line of its own: progress is wiped first)."""
    progress.stop()
    print(f"q25deploy: {message}", file=sys.stderr)
    return code
