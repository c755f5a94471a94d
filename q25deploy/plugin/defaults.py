"""The core's default hook implementations (registered ``trylast``: plugins override)."""

from __future__ import annotations

from ..board.dtsi import reserved_memory_dtsi
from ..board.plan import place_regions, plan_partitions
from .hookspecs import ImageLayout, hookimpl


@hookimpl(trylast=True)
def q25deploy_image_layout(target, board):
    return ImageLayout(
        alignment=board.layout.image_alignment, install_dir=board.install_path, runtime=board.runtime_path
    )


@hookimpl(trylast=True)
def q25deploy_partition_plan(target, board, tensors):
    return plan_partitions(tensors, board)


@hookimpl(trylast=True)
def q25deploy_reserved_regions(target, board, partitions):
    return place_regions(board, partitions)


@hookimpl(trylast=True)
def q25deploy_reserved_memory_dtsi(target, board, plan):
    return reserved_memory_dtsi(board, plan)
