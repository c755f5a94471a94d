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


@hookimpl(trylast=True)
def q25deploy_layer_files(target, board, build):
    from ..ota.layer_files import ota_layer_files
    from ..packer.dropbear import dropbear_layer_files
    from ..packer.layer import device_tree_files

    files = device_tree_files(board, build["dtsi"])
    files.update((f.path, f.data) for f in ota_layer_files(board))  # board file [ota]: off by default
    files.update((f.path, f.data) for f in dropbear_layer_files(board))  # [ssh] dropbear_receive_window: off
    return files
