"""The board-side C runtime: ``runtime build`` compiles q25tok, libq25tok.a and q25tok.h."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_group, emit

BUILD_DESCRIPTION = (
    "Compile the C runtime from this installation's sources with its Makefile, as the BitBake "
    "recipe does: host cc by default, aarch64-linux-gnu-gcc -mcpu=cortex-a53 with --cross aarch64, "
    "AddressSanitizer+UndefinedBehaviorSanitizer with --sanitize."
)


def add_commands(sub) -> None:
    """Add runtime (build) to the CLI's sub-parsers."""
    rts = add_group(
        sub,
        "runtime",
        help="build the board-side C runtime (q25tok)",
        description="The C runtime that tokenizes on the board (q25tok, libq25tok.a, q25tok.h), "
        "built from this installation's sources.",
        what="what to do with the runtime",
    )
    rb = rts.add_parser("build", help="compile q25tok, libq25tok.a and q25tok.h", description=BUILD_DESCRIPTION)
    rb.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        type=Path,
        help="output directory for q25tok, libq25tok.a, q25tok.h and the manifest",
    )
    rb.add_argument("--cross", choices=["aarch64"], help="cross-compile for the Cortex-A53 (Zynq UltraScale+)")
    rb.add_argument("--sanitize", action="store_true", help="host build with ASan and UBSan")
    rb.add_argument(
        "--static",
        action="store_true",
        help="link q25tok statically: for boards with an older glibc than the toolchain's, or musl",
    )
    rb.add_argument("--json", action="store_true", help="print the output manifest as JSON")
    rb.set_defaults(func=cmd_runtime_build)


def cmd_runtime_build(a: argparse.Namespace) -> int:
    from ..packer.runtime import build_runtime
    from .progress import Progress, wanted

    prog = Progress(enabled=wanted(json=a.json), task="runtime")
    prog.step("compiling the C runtime")
    manifest = build_runtime(a.out, cross=a.cross, sanitize=a.sanitize, static=a.static)
    prog.done()
    rt = manifest["runtime"]
    return emit(
        a,
        manifest,
        f"built q25tok, libq25tok.a and q25tok.h for {rt['target']}"
        f"{' (static)' if rt['static'] else ''} with "
        f"{rt['toolchain']['cc']} in {a.out}",
    )
