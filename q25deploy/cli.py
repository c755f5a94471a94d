"""The ``q25deploy`` command line.

This is the one place where errors become messages and exit codes (see ``EXIT_CODES``,
documented in README.md). Library code raises :class:`~q25deploy.errors.Q25Error`
subclasses and never prints or exits.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from . import __version__
from .boards import BoardFileError
from .deploy.errors import DeployError
from .layer import LicenseError
from .partition import FitError
from .plugin_manager import UnknownTargetError
from .commands import (
    cmd_build,
    cmd_detokenize,
    cmd_export_tensors,
    cmd_export_tokenizer,
    cmd_inspect,
    cmd_runtime_build,
    cmd_targets,
    cmd_tokenize,
)
from .deploy.commands import add_deploy_commands
from .errors import (
    CodecError,
    GGUFError,
    ImageError,
    ModelSourceError,
    OutputError,
    Q25Error,
    TokenizerError,
    ToolError,
    UsageError,
)

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


def _positive_pow2(s: str) -> int:
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if v < 64 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"{v} is not a power of two >= 64")
    return v


def _release(s: str) -> int:
    if not (s.isascii() and s.isdigit()):
        raise argparse.ArgumentTypeError(f"{s!r} is not a release number (0, 1, 2, ...)")
    return int(s)


def _one_line_text(s: str) -> str:
    if not s.strip() or not s.isprintable():
        raise argparse.ArgumentTypeError(f"{s!r} is not one line of text")
    return s.strip()


def _group(sub, name: str, help: str):
    """A command with sub-commands of its own (``export tokenizer``, ``runtime build``)."""
    parser = sub.add_parser(name, help=help)
    group = parser.add_subparsers(dest="what", metavar="WHAT")
    group.required = True
    return group


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

    sp = sub.add_parser("inspect", help="show a model's metadata, tensors, tokenizer and quant mix",
                        description="Show the catalog of MODEL: metadata, tensor directory, tokenizer summary "
                        "and quant mix. Reads the GGUF header only; tensor data is never read.")
    sp.add_argument("model", metavar="MODEL")
    sp.add_argument("--json", action="store_true", help="print the full catalog as JSON (for scripts)")
    sp.set_defaults(func=cmd_inspect)

    bd = sub.add_parser("build", help="build everything for a target board (the main job)",
                        description="Build the tokenizer image, tensor partitions, memory map, device-tree "
                        "fragment and memory picture for one target into DIR (default q25-build/TARGET), "
                        "atomically, incrementally and reproducibly. Without --model: Ollama's qwen2.5:0.5b "
                        "if present, else the built-in demo model.")
    bd.add_argument("--target", metavar="NAME", help="target board (see `q25deploy targets`)")
    bd.add_argument("--model", metavar="MODEL", help="a .gguf path or an Ollama reference")
    bd.add_argument("--out", metavar="DIR", type=Path, help="output directory (default q25-build/TARGET)")
    bd.add_argument("--target-file", metavar="FILE", help="your own board file (TOML, see docs/boards.md)")
    bd.add_argument("--model-license", metavar="ID",
                    help="the model's licence id for the layer's recipe (default: GGUF general.license)")
    bd.add_argument("--model-license-file", metavar="FILE",
                    help="the model's licence text (default: the Ollama licence layer, or the text q25deploy "
                    "ships for Apache-2.0)")
    bd.add_argument("--layer-release", metavar="N", type=_release, default=0,
                    help="release number in the model-assets recipe's PV (1.N+q25.HASH; default 0): raise it for "
                    "every update you ship so package managers see a newer version")
    bd.add_argument("--layer-maintainer", metavar="'NAME <ADDRESS>'", type=_one_line_text,
                    help="who answers for the layer (its README's maintainer; yocto-check-layer wants one)")
    bd.add_argument("--json", action="store_true", help="print the build summary as JSON")
    bd.set_defaults(func=cmd_build)

    add_deploy_commands(sub)

    tg = sub.add_parser("targets", help="list target boards and the plugins that provide them",
                        description="List the targets registered by plugins (q25deploy entry points); broken "
                        "plugins are reported on stderr and left out.")
    tg.add_argument("--json", action="store_true", help="print JSON (targets and failed plugins)")
    tg.set_defaults(func=cmd_targets)

    exs = _group(sub, "export", "export tokenizer assets or tensor payloads")
    et = exs.add_parser("tokenizer", help="write the tokenizer assets, PS bundle and Q25TOKRT runtime image",
                        description="Write tokens.jsonl, merges.txt, token_types.bin, chat_template.txt, the PS "
                        "bundle (token_index.bin, token_bytes.bin, merge_table_u32.bin), the Q25TOKRT runtime "
                        "image and manifests into DIR. DIR is replaced atomically.")
    et.add_argument("model", metavar="MODEL")
    et.add_argument("--out", required=True, metavar="DIR", type=Path)
    et.add_argument("--alignment", type=_positive_pow2, default=4096,
                    help="section alignment of the runtime image (power of two, default 4096)")
    et.add_argument("--json", action="store_true", help="print the runtime image manifest as JSON")
    et.set_defaults(func=cmd_export_tokenizer)

    ex2 = exs.add_parser("tensors", help="write one file per tensor, byte-identical to the GGUF payload",
                         description="Write tensors/NAME.bin for every tensor (byte-identical to the GGUF payload, "
                         "copied by the kernel) and tensor_payload_export_manifest.json into DIR.")
    ex2.add_argument("model", metavar="MODEL")
    ex2.add_argument("--out", required=True, metavar="DIR", type=Path)
    ex2.add_argument("--json", action="store_true", help="print the manifest as JSON")
    ex2.set_defaults(func=cmd_export_tensors)

    tk = sub.add_parser("tokenize", help="encode text to token ids with a runtime image",
                        description="Encode raw UTF-8 bytes (TEXT, each --file, or stdin) into token ids exactly "
                        "as llama.cpp's llama_tokenize(add_special=false) does. One output line per input.")
    tk.add_argument("--image", required=True, metavar="IMG", help="a Q25TOKRT runtime image")
    tk.add_argument("--special", action="store_true", help="parse control tokens such as <|im_start|> in the text")
    tk.add_argument("--json", action="store_true", help="print JSON instead of space-separated ids")
    tk.add_argument("--file", action="append", metavar="F", help="encode this file (repeatable)")
    tk.add_argument("text", nargs="?", metavar="TEXT")
    tk.set_defaults(func=cmd_tokenize)

    rts = _group(sub, "runtime", "build the board-side C runtime (q25tok)")
    rb = rts.add_parser("build", help="compile q25tok, libq25tok.a and q25tok.h",
                        description="Compile the C runtime from this installation's sources with its Makefile, "
                        "as the BitBake recipe does: host cc by default, aarch64-linux-gnu-gcc -mcpu=cortex-a53 "
                        "with --cross aarch64, AddressSanitizer+UndefinedBehaviorSanitizer with --sanitize.")
    rb.add_argument("--out", required=True, metavar="DIR", type=Path)
    rb.add_argument("--cross", choices=["aarch64"], help="cross-compile for the Cortex-A53 (Zynq UltraScale+)")
    rb.add_argument("--sanitize", action="store_true", help="host build with ASan and UBSan")
    rb.add_argument("--json", action="store_true", help="print the output manifest as JSON")
    rb.set_defaults(func=cmd_runtime_build)

    dt = sub.add_parser("detokenize", help="write the bytes of token ids",
                        description="Write the bytes of the given token ids to stdout. Control tokens are "
                        "written only with --special.")
    dt.add_argument("--image", required=True, metavar="IMG")
    dt.add_argument("--special", action="store_true", help="also write control tokens' text")
    dt.add_argument("ids", nargs="+", metavar="ID")
    dt.set_defaults(func=cmd_detokenize)
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
