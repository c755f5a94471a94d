"""An out-of-tree board plugin: Ultra96-V2 (ZU3EG, 2 GiB LPDDR4). It registers the target
from its own board file, overrides the runtime image layout for its board only and adds a
command of its own (``q25deploy ultra96-info``)."""

import json
from pathlib import Path

from q25deploy.errors import UsageError
from q25deploy.plugin.hookspecs import CommandSpec, ImageLayout, TargetSpec, hookimpl

NAME = "ultra96"


@hookimpl
def q25deploy_register_targets():
    return [TargetSpec(NAME, Path(__file__).with_name("ultra96.toml"), "Avnet Ultra96-V2 (example plugin)")]


@hookimpl
def q25deploy_image_layout(target, board):
    # this board's loader maps sections in 16 KiB pages and keeps models under /opt
    return ImageLayout(alignment=16384, install_dir="/opt/q25")


def _info_arguments(parser):
    parser.add_argument("--bank", metavar="NAME", help="show this DDR bank only")
    parser.add_argument("--json", action="store_true", help="the result as JSON")


def _info(args, context):
    board = context.resolve_target(NAME).board
    banks = [b for b in board.banks if args.bank in (None, b.name)]
    if not banks:
        raise UsageError(f"no DDR bank {args.bank!r} on {NAME} (banks: {', '.join(b.name for b in board.banks)})")
    rows = [{"bank": b.name, "base": b.base, "size": b.size} for b in banks]
    print(
        json.dumps({"plugin": context.plugin, "target": NAME, "banks": rows})
        if args.json
        else "\n".join(f"{r['bank']}  {r['base']:#x}  {r['size']:#x}" for r in rows)
    )
    return 0


@hookimpl
def q25deploy_cli_commands():
    return [
        CommandSpec(
            "ultra96-info",
            "show the Ultra96's DDR banks (example plugin command)",
            "Show the DDR banks of the Ultra96 board file.",
            _info_arguments,
            _info,
        )
    ]
