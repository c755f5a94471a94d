"""The board commands on the host: ``build`` (everything for one target) and ``targets`` (the
boards plugins provide)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..common import parse_size
from ..errors import Q25Error
from .common import add_model_argument, forward_prompts, one_line_text, release_number, report_failures


def add_commands(sub) -> None:
    """Add build and targets to the CLI's sub-parsers."""
    bd = sub.add_parser(
        "build",
        help="build everything for a target board (the main job)",
        description="Build the tokenizer image, tensor partitions, memory map, device-tree "
        "fragment and memory picture for one target into DIR (default q25-build/TARGET), "
        "atomically, incrementally and reproducibly. Without MODEL: Ollama's qwen2.5:0.5b "
        "if present, else the built-in demo model.",
    )
    bd.add_argument("--target", metavar="NAME", help="target board (see `q25deploy targets`)")
    add_model_argument(bd, required=False, default="qwen2.5:0.5b if Ollama has it, else a demo model")
    bd.add_argument("--out", metavar="DIR", type=Path, help="output directory (default q25-build/TARGET)")
    bd.add_argument("--target-file", metavar="FILE", help="your own board file (TOML, see docs/boards.md)")
    bd.add_argument(
        "--model-license",
        metavar="ID",
        help="the model's licence id for the layer's recipe (default: GGUF general.license)",
    )
    bd.add_argument(
        "--model-license-file",
        metavar="FILE",
        help="the model's licence text (default: the Ollama licence layer, or the text q25deploy ships for Apache-2.0)",
    )
    bd.add_argument(
        "--reserve",
        metavar="SIZE",
        type=reserve_size,
        help="reserve SIZE (1GiB, 768MiB, bytes) for models, whatever this one needs; 0: sized to "
        "it (details: docs/commands.md)",
    )
    bd.add_argument(
        "--forward",
        type=forward_record_prompts,
        default=1,
        metavar="N|all",
        help="record the host's forward pass on the first N smoke prompts, what deploy's and "
        "package's --forward N check (default 1, as theirs; all: every one)",
    )
    _add_layer_options(bd.add_argument_group("the BitBake layer"))
    out = bd.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the build summary as JSON (no progress)")
    out.add_argument("--quiet", action="store_true", help="no live progress on the terminal")
    out.add_argument(
        "--strict",
        action="store_true",
        help="a warning fails the build (exit 1; DIR is written all the same): a host reference "
        "forward pass that is not finite",
    )
    bd.set_defaults(func=cmd_build)

    tg = sub.add_parser(
        "targets",
        help="list target boards and the plugins that provide them",
        description="List the targets registered by plugins (q25deploy entry points); broken "
        "plugins are reported on stderr and left out.",
    )
    tg.add_argument("--json", action="store_true", help="print JSON (targets and failed plugins)")
    tg.set_defaults(func=cmd_targets)


def _add_layer_options(group) -> None:
    group.add_argument(
        "--layer-release",
        metavar="N",
        type=release_number,
        default=0,
        help="release number in the model-assets recipe's PV (1.N+q25.HASH; default 0): raise it "
        "for every update you ship so package managers see a newer version",
    )
    group.add_argument(
        "--layer-maintainer",
        metavar="'NAME <ADDRESS>'",
        type=one_line_text,
        help="who answers for the layer (its README's maintainer; yocto-check-layer wants one)",
    )


def forward_record_prompts(text: str) -> int | None:
    """``build --forward``: a count of smoke prompts from 1, or ``all`` (None)."""
    n = forward_prompts(text)
    if n == 0:
        raise argparse.ArgumentTypeError("a build records at least 1 prompt (deploy --forward 0 runs none)")
    return n


def reserve_size(text: str) -> int:
    n = parse_size(text)
    if n is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (1GiB, 768MiB, 0x40000000, bytes)")
    return n


def requested(a: argparse.Namespace) -> dict:
    """The build's options but the target, the output folder and the progress."""
    return {
        "model": a.model,
        "target_file": a.target_file,
        "model_license": a.model_license,
        "model_license_file": a.model_license_file,
        "layer_release": a.layer_release,
        "layer_maintainer": a.layer_maintainer,
        "reserve": a.reserve,
        "forward_prompts": a.forward,
    }


def cmd_build(a: argparse.Namespace) -> int:
    from ..packer.pipeline import build
    from .progress import Progress, wanted

    prog = Progress(enabled=wanted(quiet=a.quiet, json=a.json), task=a.target or "build")
    with prog.running("build"):
        result = build(a.target, out=a.out, progress=prog.step, **requested(a))
    report_failures(result.failures)
    warnings = build_warnings(result.out)
    if warnings and getattr(a, "strict", False):
        raise StrictBuildError(f"{warnings[0]} (--strict)")
    for w in warnings:
        print(f"q25deploy: warning: {w}", file=sys.stderr)
    if a.json:
        print(
            json.dumps(
                {
                    "out": str(result.out),
                    "up_to_date": result.up_to_date,
                    "note": result.note,
                    **result.summary,
                    "warnings": warnings,
                    **({"payload": result.payload} if result.payload else {}),
                },
                indent=2,
            )
        )
        return 0
    from ..packer.summary import render_summary

    print(render_summary(result))
    return 0


class StrictBuildError(Q25Error):
    """A build warning under ``--strict`` (exit 1)."""


def build_warnings(out: Path) -> list[str]:
    """What the build made that works but will not pass its checks: the host reference's
    forward pass gone non-finite (a block scale inf or NaN: every board's forward check would
    then differ there)."""
    from ..builddir import BuildDir
    from ..model.record_compare import first_non_finite

    record = BuildDir(out).forward_record
    where = first_non_finite(record) if record is not None else None
    if where is None:
        return []
    return [
        f"the host reference forward pass is not finite from {where}: the model's weights there "
        "(a block scale that is inf or NaN?) make every board's forward check fail"
    ]


TARGETS_HEADER = ("NAME", "PLUGIN", "DDR", "DESCRIPTION")


def _target_row(name: str, plugin: str, spec) -> dict:
    from ..board.boardfile import load_board

    row = {"name": name, "plugin": plugin, "description": spec.description, "board_file": str(spec.board_file)}
    try:
        row["ddr_bytes"] = load_board(spec.board_file).ddr_bytes
    except Q25Error as e:
        row["error"] = str(e)
    return row


def _target_line(name: str, plugin: str, size: str, description: str) -> str:
    return f"{name:<10} {plugin:<12} {size:<12} {description}"


def cmd_targets(a: argparse.Namespace) -> int:
    from ..plugin.manager import make_plugin_manager, registered_targets

    pm, failures = make_plugin_manager()
    rows = [_target_row(name, plugin, spec) for name, (plugin, spec) in registered_targets(pm, failures).items()]
    report_failures(failures)
    if a.json:
        print(
            json.dumps(
                {"targets": rows, "failed_plugins": [{"plugin": f.plugin, "error": f.error} for f in failures]},
                indent=2,
            )
        )
        return 0
    print(_target_line(*TARGETS_HEADER))
    for r in rows:
        size = f"{r['ddr_bytes'] / (1 << 30):g} GiB DDR" if "ddr_bytes" in r else f"broken: {r['error']}"
        print(_target_line(r["name"], r["plugin"], size, r["description"]))
    return 0
