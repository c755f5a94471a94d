"""An out-of-tree board plugin: Ultra96-V2 (ZU3EG, 2 GiB LPDDR4). It registers the target
from its own board file and overrides the runtime image layout for its board only."""

from pathlib import Path

from q25deploy.plugin.hookspecs import ImageLayout, TargetSpec, hookimpl

NAME = "ultra96"


@hookimpl
def q25deploy_register_targets():
    return [TargetSpec(NAME, Path(__file__).with_name("ultra96.toml"), "Avnet Ultra96-V2 (example plugin)")]


@hookimpl
def q25deploy_image_layout(target, board):
    if target != NAME:
        return None
    # this board's loader maps sections in 16 KiB pages and keeps models under /opt
    return ImageLayout(alignment=16384, install_dir="/opt/q25")
