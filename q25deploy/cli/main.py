"""The ``q25deploy`` command line: the top-level parser, the exit codes and ``main``.

Each command group (``models``, ``build``, ``deploy``, ``tokens``, ``runtime``) adds its own
sub-parsers and handlers. This is the one place where errors become messages and exit codes
(``EXIT_CODES``, documented in README.md). Library code raises
:class:`~q25deploy.errors.Q25Error` subclasses and never prints or exits.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from .. import __version__
from ..errors import (
    BoardFileError,
    CodecError,
    DeployError,
    FitError,
    GGUFError,
    ImageError,
    LicenseError,
    ModelSourceError,
    OutputError,
    Q25Error,
    TokenizerError,
    ToolError,
    UnknownTargetError,
    UsageError,
)
from . import build, deploy, models, runtime, tokens

#: the command groups, each a module with ``add_commands(subparsers)`` and its handlers, in the
#: order ``--help`` lists them
COMMAND_GROUPS = (models, build, deploy, tokens, runtime)

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
    (UnknownTargetError, 2),
    (Q25Error, 1),
]
EXIT_INTERNAL = 70  # a bug: an unexpected exception (EX_SOFTWARE)
EXIT_INTERRUPTED = 130


EPILOG = """\
MODEL is a path to a .gguf file or an Ollama reference such as qwen2.5:0.5b
(looked up in $OLLAMA_MODELS or ~/.ollama/models).

exit codes: 0 ok, 2 usage, 3 model not found / digest mismatch, 4 not a valid GGUF,
5 unsupported tokenizer, 6 bad runtime image, 7 bad token id / encode failure,
8 cannot write output, 9 a system tool is missing or failed, 10 the model does not
fit the board, 11 bad board file, 12 the model's licence is unknown, 13 a board failed
(deploy, smoke, rollback, status; the other boards are unaffected), 70 internal error,
130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="q25deploy",
        description="Take a Qwen2.5 model (GGUF file or Ollama model) onto Zynq UltraScale+ boards.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"q25deploy {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    return p


def exit_code_for(err: Q25Error) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(err, cls):
            return code
    return 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except Q25Error as e:
        print(f"q25deploy: error: {_one_line(str(e))}", file=sys.stderr)
        return exit_code_for(e)
    except KeyboardInterrupt:
        print("q25deploy: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug, not bad input: one line, full trace only on request
        if os.environ.get("Q25DEPLOY_DEBUG"):
            raise
        print(f"q25deploy: internal error: {type(e).__name__}: {_one_line(str(e))} "
              "(set Q25DEPLOY_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL
