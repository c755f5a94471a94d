"""The host's side of the board's tensor probe (``q25tok probe``, C runtime ``cli_probe.c``).

On the board the probe reads, from the reserved regions, the first and last block of every
tensor and the embedding rows of the smoke prompts' token ids, dequantizes them and prints
``NAME TYPE_NAME SHA256`` per tensor. The build computes the same lines here from the GGUF with
gguf-py's numpy dequantization and records them in ``probe_digests.json``; deploy's smoke test
runs the probe and compares (:func:`mismatches`).

The digest is SHA-256 of the float32 values' little-endian bits: the C runtime has SHA-256
already (``q25_sha256``, the CPU's SHA instructions where it has them) and hashlib computes it
identically; a weaker or shorter hash would save nothing measurable next to reading Device
memory. NaNs are hashed as 0x7fc00000 on both sides: which NaN ``inf * 0`` gives is the CPU's
choice (x86 0xffc00000, ARMv8 0x7fc00000).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from ..schema import PROBE_FORMAT as FORMAT
from ..schema import PROBE_UNSUPPORTED as UNSUPPORTED

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

KIND = "probe-digests"
EMBEDDING = "token_embd.weight"
# what q25_dequantize knows (q25tok_dequant.c); the probe reports other types "unsupported"
DEQUANTIZED = frozenset(
    {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
)


def _values(blocks: bytes, qtype: GGMLQuantizationType) -> bytes:
    import numpy as np  # here, as gguf below: the smoke test imports this module for mismatches() alone
    from gguf.quants import dequantize

    with np.errstate(all="ignore"):
        out = dequantize(np.frombuffer(blocks, dtype=np.uint8), qtype)
    bits = np.ascontiguousarray(out, dtype="<f4").reshape(-1).view("<u4").copy()
    bits[(bits & 0x7FFFFFFF) > 0x7F800000] = 0x7FC00000
    return bits.tobytes()


class FileRange:
    """A tensor's bytes in a file, read on demand (``pread``): the probe needs a few blocks of
    each tensor, and reading them through the GGUF's mapping would map the pages around each
    one into the build's memory (fault-around: tens of MB over a 3B model's tensors)."""

    def __init__(self, fd: int, offset: int, nbytes: int) -> None:
        self.fd, self.offset, self.nbytes = fd, offset, nbytes

    def __len__(self) -> int:
        return self.nbytes

    def __getitem__(self, s: slice) -> bytes:
        start, stop, _ = s.indices(self.nbytes)
        return os.pread(self.fd, max(0, stop - start), self.offset + start)


def tensor_digest(data: bytes | memoryview | FileRange, type_name: str, shape: list[int], ids: list[int]) -> str:
    """What ``q25tok probe`` prints after the name and type for a tensor of these bytes."""
    if type_name not in DEQUANTIZED:
        return UNSUPPORTED
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    qtype = GGMLQuantizationType[type_name]
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if not isinstance(data, FileRange):
        data = memoryview(data)
    h = hashlib.sha256(_values(bytes(data[:block_bytes]), qtype))
    if len(data) > block_bytes:
        h.update(_values(bytes(data[-block_bytes:]), qtype))
    if ids:
        row = shape[0] // block_elems * block_bytes
        for i in ids:
            h.update(_values(bytes(data[i * row : (i + 1) * row]), qtype))
    return h.hexdigest()


def probe_ids(smoke_ids: list[list[int]]) -> list[int]:
    """The embedding rows the probe reads: every id of the smoke prompts, once, ascending."""
    return sorted({i for ids in smoke_ids for i in ids})


def probe_record(f, partition_map: dict, smoke_ids: list[list[int]]) -> dict:
    """``probe_digests.json``: the ids the probe is given and each tensor's expected digest,
    in the tensor table's order, from the GGUF ``f`` (a :class:`~q25deploy.model.gguf.GGUFFile`)."""
    ids = probe_ids(smoke_ids)
    tensors = []
    fd = os.open(f.path, os.O_RDONLY)
    try:
        for t in partition_map["tensors"]:
            info = f.tensor(t["name"])
            rows = ids if t["name"] == EMBEDDING else []
            data = FileRange(fd, info.data_offset, info.nbytes)
            tensors.append(
                {"name": t["name"], "type": t["type"], "digest": tensor_digest(data, t["type"], t["shape"], rows)}
            )
    finally:
        os.close(fd)
    return {"format": FORMAT, "model_sha256": partition_map["model"]["sha256"], "ids": ids, "tensors": tensors}


def mismatches(record: dict, probe_output: str) -> list[str]:
    """The tensors whose probe line differs from the record (or is missing), named; and any
    line the record does not expect."""
    want = {t["name"]: f"{t['type']} {t['digest']}" for t in record["tensors"]}
    got: dict[str, str] = {}
    for line in probe_output.splitlines():
        name, _, rest = line.partition(" ")
        got[name] = rest
    bad = [n for n in want if got.get(n) != want[n]]
    return bad + sorted(n for n in got if n not in want)
