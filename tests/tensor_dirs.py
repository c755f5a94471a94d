"""Tensor directories of the Qwen2.5 presets, laid out as GGUFWriter would (no data needed):
what the memory planner and its consumers are tested with."""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType

from q25deploy.board.plan import align_up
from q25deploy.model.synthetic import PRESETS, nbytes, tensor_plan


@dataclass(frozen=True)
class T:
    name: str
    shape: tuple
    ggml_type: int
    data_offset: int
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.ggml_type).name


def model(preset: str) -> list[T]:
    """Tensor directory of a Qwen2.5 preset."""
    out, off = [], 6_000_000
    for name, shape, q in tensor_plan(PRESETS[preset]):
        n = nbytes(shape, q)
        out.append(T(name, shape, int(q), off, n))
        off = align_up(off + n, 32)
    return out
