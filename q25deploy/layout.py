"""The names inside a build directory, in one place: what ``build`` writes, what the layer
packages and what a release carries to a board (``deploy`` reads them from here)."""

from __future__ import annotations

from collections.abc import Sequence

MANIFEST = "manifest.json"
STAMP = ".q25deploy-stamp.json"  # incremental-build record, outside the manifest (paths, mtimes)
BUILD_INFO = "build.json"
PARTITION_MAP = "partition_map.json"
REGION_TABLE = "partitions/regions.tab"  # the partition map for C: q25tok load/verify on the board
TENSOR_TABLE = "partitions/tensors.tab"  # where each tensor lies in the regions, for C (q25_tensor_find)
TABLES = (REGION_TABLE, TENSOR_TABLE)  # the files under partitions/ that are not partitions
MEMORY_HEADER = "q25_memory_map.h"
DTSI = "reserved-memory.dtsi"
SVG = "memory-map.svg"
SMOKE_IDS = "smoke_ids.json"  # the smoke prompts' ids for this image (deploy's smoke test compares the board with them)
PROBE_DIGESTS = "probe_digests.json"  # what `q25tok probe` must print on the board (packer/probe.py)
FORWARD_RECORD = "forward_record.json"  # the host reference on the smoke prompts, teacher-forced (docs/forward.md)
FORWARD_RECORD_FORMAT = "q25deploy-forward-record/3"  # its "format" (schema.parse_forward_record)
HPARAMS = "model_hparams.txt"  # the model's hyperparameters for the C runtime's forward pass (docs/forward.md)
UBOOT_SCRIPT = "uboot/q25-regions.cmd"  # loads the partitions into their regions from U-Boot (boot.scr)
TOKENIZER_DIR = "tokenizer"
IMAGE_MANIFEST_NAME = "tokenizer_runtime_image_manifest.json"
IMAGE_MANIFEST = f"{TOKENIZER_DIR}/{IMAGE_MANIFEST_NAME}"
ASSETS_MANIFEST = "assets_manifest.json"  # the layer's q25-model-assets: its files under the install dir
RUNTIME_BIN = "q25tok"  # the board runtime, when a release carries its own (--runtime-bin)


def partition_file(index: int) -> str:
    return f"partitions/region_{index:02d}.bin"


def is_partition(rel: str) -> bool:
    """Whether a build or release path is a partition (not one of the :data:`TABLES`)."""
    return rel.startswith("partitions/") and rel not in TABLES


def tokenizer_file(name: str) -> str:
    return f"{TOKENIZER_DIR}/{name}"


def release_files(image: str, partitions: Sequence[str]) -> list[str]:
    """The build files a release carries to the board (paths in the build directory): the
    runtime image and its manifest, the partition map, the region and tensor tables, the
    hyperparameters and the forward record, and every partition."""
    return [image, IMAGE_MANIFEST, PARTITION_MAP, REGION_TABLE, TENSOR_TABLE, HPARAMS, FORWARD_RECORD, *partitions]


# release files a build of an older q25deploy (or of a model the forward pass cannot run) lacks
OPTIONAL_RELEASE_FILES = (TENSOR_TABLE, HPARAMS, FORWARD_RECORD)


def release_name(build_path: str) -> str:
    """Where a release file lives inside ``releases/<id>/`` on the board: the tokenizer's
    files at the top, everything else at its build path."""
    prefix = TOKENIZER_DIR + "/"
    return build_path[len(prefix) :] if build_path.startswith(prefix) else build_path


def tokenizer_update_names(image_name: str) -> set[str]:
    """What a tokenizer-only update replaces in a release (names inside the release)."""
    return {image_name, IMAGE_MANIFEST_NAME, RUNTIME_BIN}
