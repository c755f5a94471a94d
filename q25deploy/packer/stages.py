"""The stages of ``q25deploy build``, each a function of its inputs (data in, data out).

resolve model → licence → plan → payload (copy + digests) → tokenizer → board files → summary
→ layer → manifest. :mod:`q25deploy.packer.pipeline` runs them: it owns the output directory
(atomicity), reuse of unchanged stages (incrementality), overlap (threads) and progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import layout
from ..board.boardfile import Board
from ..board.header import memory_header
from ..board.plan import MemoryPlan, assemble
from ..board.svg import memory_svg
from ..common import json_digest
from ..model.gguf import GGUFFile
from ..model.source import ModelSource
from ..plugin.hookspecs import ImageLayout
from ..plugin.manager import Target
from ..plugin.routing import board_hooks
from ..tokenizer.assets import Asset, tokenizer_assets
from ..tokenizer.prompts import SMOKE_PROMPTS
from ..tokenizer.vocab import vocab_from_gguf
from .dropbear import dropbear_layer_files
from .layer import (
    DEVICE_TREE_DIR,
    LayerFile,
    Licence,
    assets_recipe_pv,
    device_tree_files,
    layer_readme,
    layer_security,
    merge_hook_results,
    model_assets_files,
    model_license,
    smoke_test_case,
    static_files,
)
from .ota_layer import ota_layer_files
from .payload import Piece, check_plain_names
from .region_table import KIND as REGION_TABLE_KIND
from .region_table import region_table
from .tensor_table import KIND as TENSOR_TABLE_KIND
from .tensor_table import tensor_table
from .uboot_script import KIND as UBOOT_SCRIPT_KIND
from .uboot_script import uboot_script


@dataclass(frozen=True)
class ModelInfo:
    """What the stages need of the model besides its bytes."""

    name: str  # general.name ("" when absent or not a string)
    license: str | None  # general.license


def model_info(f: GGUFFile) -> ModelInfo:
    """The model's name and licence id; refuses tensor names that cannot become file names."""
    check_plain_names(f.tensors)
    name, lic = f.metadata.get("general.name", ""), f.metadata.get("general.license")
    return ModelInfo(name if isinstance(name, str) else "", lic if isinstance(lic, str) else None)


def licence(src: ModelSource, info: ModelInfo, license_id: str | None, license_file: str | None) -> Licence:
    """The recipe's licence, resolved before any heavy work so a missing one fails at once."""
    return model_license({"license": info.license, "ollama": src.ollama or None}, license_id, license_file)


@dataclass(frozen=True)
class Plan:
    """Where every tensor goes, and what the board files need of it."""

    memory: MemoryPlan
    layout: ImageLayout
    dtsi: str
    files: list[str]  # partition file per region
    pieces: list[Piece]  # source range → partition offset, per tensor
    key: str  # content key of the placement

    @property
    def sizes(self) -> list[int]:
        return [r.used for r in self.memory.regions]


def plan(pm, target: Target, f: GGUFFile) -> Plan:
    """Partitions, regions, image layout and the device-tree fragment, from the board's hooks."""
    board, hooks = target.board, board_hooks(pm, target)
    partitions = hooks.q25deploy_partition_plan(board=board, tensors=f.tensors)
    regions = hooks.q25deploy_reserved_regions(board=board, partitions=partitions)
    memory = assemble(partitions, regions, board, f.tensors)
    image_layout = hooks.q25deploy_image_layout(board=board)
    dtsi = hooks.q25deploy_reserved_memory_dtsi(board=board, plan=memory)
    placed = [(t.name, t.source_offset, t.nbytes, t.region, t.offset) for t in memory.tensors]
    key = json_digest([[(r.base, r.size, r.used) for r in memory.regions], placed])
    return Plan(
        memory,
        image_layout,
        dtsi,
        [layout.partition_file(r.index) for r in memory.regions],
        [Piece(*p) for p in placed],
        key,
    )


def tokenizer(f: GGUFFile, model_sha256: str, info: ModelInfo, alignment: int) -> list[Asset]:
    """The tokenizer assets and runtime image (the expensive stage: cached by the driver)."""
    assets, _ = tokenizer_assets(
        vocab_from_gguf(f), source_sha256=model_sha256, model_name=info.name, alignment=alignment
    )
    return assets


def tokenizer_path(image_layout: ImageLayout, name: str) -> str:
    """Where an asset lands in the build: the image under the board's file name."""
    return layout.tokenizer_file(image_layout.filename if name == "tokenizer.q25tokrt" else name)


def partition_map(
    target: Target, p: Plan, model_sha256: str, info: ModelInfo, tensor_sha: dict[str, str], part_sha: list[str]
) -> dict:
    memory = p.memory
    return {
        "format": "q25deploy-partition-map/1",
        "target": target.name,
        "model": {"sha256": model_sha256, "name": info.name},  # content only: no paths
        "regions": [
            {
                "index": r.index,
                "label": r.label,
                "node": r.node_name,
                "base": r.base,
                "size": r.size,
                "used": r.used,
                "bank": r.bank,
                "file": rel,
                "sha256": sha,
            }
            for r, rel, sha in zip(memory.regions, p.files, part_sha)
        ],
        "tensors": [
            {
                "name": t.name,
                "region": t.region,
                "address": memory.address(t),
                "offset": t.offset,
                "bytes": t.nbytes,
                "type": t.type_name,
                "shape": list(t.shape),
                "sha256": tensor_sha[t.name],
                "source_offset": t.source_offset,
            }
            for t in memory.tensors
        ],
    }


def board_files(target: Target, p: Plan, pmap: dict) -> list[tuple[str, bytes, str]]:
    """The plan for other tools: (path, bytes, kind) of the region table (``q25tok load`` on the
    board), the tensor table (``q25_tensor_find``), the C header, the dtsi, the picture and the U-Boot script (the regions loaded before
    Linux)."""
    return [
        (layout.REGION_TABLE, region_table(pmap).encode(), REGION_TABLE_KIND),
        (layout.TENSOR_TABLE, tensor_table(pmap).encode(), TENSOR_TABLE_KIND),
        (layout.MEMORY_HEADER, memory_header(target.board, p.memory).encode(), "memory-map-header"),
        (layout.DTSI, p.dtsi.encode(), "reserved-memory-dtsi"),
        (layout.SVG, memory_svg(target.board, p.memory).encode(), "memory-map-svg"),
        (layout.UBOOT_SCRIPT, uboot_script(pmap, p.layout.install_dir).encode(), UBOOT_SCRIPT_KIND),
    ]


def summary(target: Target, src: ModelSource, info: ModelInfo, p: Plan, image_manifest: dict) -> dict:
    """``build.json``: what was built, for people, ``deploy`` and the layer."""
    board, memory = target.board, p.memory
    return {
        "target": target.name,
        "plugin": target.plugin,
        "board": {"name": board.name, "description": board.description},
        "model": {
            "reference": src.reference,
            "sha256": src.sha256,
            "name": info.name,
            "license": info.license,
            "ollama": src.ollama or None,
        },
        "image": {
            "path": layout.tokenizer_file(p.layout.filename),
            "install_dir": p.layout.install_dir,
            "alignment": p.layout.alignment,
            "size": image_manifest["size"],
            "sha256": image_manifest["sha256"],
            "vocab_fingerprint": image_manifest["vocab_fingerprint"],
        },
        "memory": {
            "budget": memory.budget,
            "reserved": memory.reserved_bytes,
            "regions": [
                {"label": r.label, "base": r.base, "size": r.size, "used": r.used, "bank": r.bank}
                for r in memory.regions
            ],
            **reservation(board, memory),
        },
        "tensors": len(memory.tensors),
    }


def reservation(board: Board, memory: MemoryPlan) -> dict:
    """A fixed reservation's use by this model (``memory.reservation`` in build.json); nothing
    without one, so a build without it stays byte-identical."""
    if not board.layout.reserve:
        return {}
    used = sum(r.used for r in memory.regions)
    return {
        "reservation": {
            "requested": board.layout.reserve,
            "size": memory.reserved_bytes,
            "regions": len(memory.regions) + len(memory.spare),
            "used": used,
            "spare": [{"label": r.label, "base": r.base, "size": r.size, "bank": r.bank} for r in memory.spare],
        }
    }


def core_layer_files(board, dtsi: str) -> dict[str, bytes | None]:
    """The layer's parts the board file asks for, before the plugins' (which override them):
    the device tree, the OTA update module (``[ota]``) and dropbear's receive window
    (``[ssh] dropbear_receive_window``), each off unless the board file turns it on."""
    files = device_tree_files(board, dtsi)
    files.update((f.path, f.data) for f in ota_layer_files(board))
    files.update((f.path, f.data) for f in dropbear_layer_files(board))
    return files


def layer(
    pm,
    target: Target,
    summary_: dict,
    p: Plan,
    artifacts: dict[str, tuple[Path, str, int]],
    lic: Licence,
    smoke_ids: list[list[int]],
    *,
    release: int = 0,
    maintainer: str | None = None,
) -> list[LayerFile]:
    """The BitBake layer's files: fixed parts, the model-assets recipe (``artifacts``: build path →
    (file, sha256, size), linked not copied), the oeqa smoke test (``smoke_ids``: the host
    codec's ids of each smoke prompt), and the board plugins' files."""
    board = target.board
    files = static_files() + model_assets_files(board, summary_, artifacts, lic, release)
    files.append(smoke_test_case(summary_, [(t, sp, ids) for (t, sp), ids in zip(SMOKE_PROMPTS, smoke_ids)]))
    answers = board_hooks(pm, target).q25deploy_layer_files(board=board, build={"dtsi": p.dtsi, "summary": summary_})
    extra = merge_hook_results([*answers, core_layer_files(board, p.dtsi)])
    by_path = {f.path: f for f in files}
    for path, data in extra.items():
        if data is None:
            by_path.pop(path, None)
        else:
            by_path[path] = LayerFile(path, data)
    has_dt = any(path.startswith(f"{DEVICE_TREE_DIR}/") for path in by_path)
    pv = assets_recipe_pv(files)
    by_path["README.md"] = layer_readme(summary_, board, has_dt, pv=pv, maintainer=maintainer)
    by_path["SECURITY.md"] = layer_security(summary_, pv=pv, maintainer=maintainer)
    return list(by_path.values())
