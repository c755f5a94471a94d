"""The tensor table: where each tensor lies in the reserved regions, in a form trivial for C.

``partitions/tensors.tab`` (kind ``tensor-table``) has one line per tensor, in the partition
map's order:

    NAME TYPE TYPE_NAME REGION OFFSET BYTES SHAPE

``TYPE`` is ggml's type number and ``TYPE_NAME`` its name, ``REGION`` the index of the
region's line in ``regions.tab``, ``OFFSET`` (hex) the tensor's first byte in that region,
``BYTES`` decimal, ``SHAPE`` ggml's ``ne0,ne1,...`` (``ne0`` = row length); ``#`` starts a
comment. On the board ``q25_tensor_find`` reads it (C runtime, ``q25tok_tensor.c``) and
``q25_dequantize`` turns the blocks it points at into float32.

A table rather than the JSON partition map: the board's C needs a few fields per tensor, and a
line of seven space-separated fields parses in a page of C without allocation (as
``regions.tab`` does), where JSON would need a parser of its own on the board.
"""

from __future__ import annotations

from gguf import GGMLQuantizationType

from ..layout import TENSOR_TABLE as TABLE  # noqa: F401 (re-exported for readers)

KIND = "tensor-table"
HEADER = "# q25deploy tensor table 1: name type type_name region offset bytes shape"


def tensor_table(partition_map: dict) -> str:
    lines = [HEADER, f"# target {partition_map['target']}, model sha256 {partition_map['model']['sha256']}"]
    for t in partition_map["tensors"]:
        qtype = GGMLQuantizationType[t["type"]]
        shape = ",".join(str(d) for d in t["shape"])
        lines.append(f"{t['name']} {qtype.value} {qtype.name} {t['region']} {t['offset']:#x} {t['bytes']} {shape}")
    return "\n".join(lines) + "\n"
