"""Where a quantised block keeps its float16 scale `d` (ggml's block layouts): flipping that
scale's high byte changes every weight of the block by a power of two, a damage a forward pass
must see wherever the block lies."""

from __future__ import annotations

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

# offset of the high byte of `d` in a block, by type: first in most blocks, last in Q6_K
SCALE_HIGH_BYTE = {"Q4_0": 1, "Q4_1": 1, "Q5_0": 1, "Q5_1": 1, "Q8_0": 1, "Q4_K": 1, "Q5_K": 1, "Q6_K": 209}


def middle_scale(tensor: dict) -> int:
    """The offset inside ``tensor``'s bytes (a partition map entry) of the high byte of the
    scale of its middle block, which the tensor probe (first and last blocks) does not read."""
    size = GGML_QUANT_SIZES[GGMLQuantizationType[tensor["type"]]][1]
    return tensor["bytes"] // size // 2 * size + SCALE_HIGH_BYTE[tensor["type"]]


def flipped(byte: int) -> int:
    """The byte with one exponent bit of the float16 flipped (the scale grows or shrinks 2^16 or 2^4 fold)."""
    return byte ^ (0x40 if byte & 0x40 == 0 else 0x10)


INF_F16 = b"\x00\x7c"  # float16 +inf, little-endian
NAN_F16 = b"\x00\x7e"  # float16 quiet NaN


def with_scale(src, dst, tensor: str, value: bytes = INF_F16) -> None:
    """A copy of the GGUF ``src`` at ``dst`` whose ``tensor``'s first block has the float16
    scale ``value`` (inf or NaN bytes): still a valid GGUF, every byte where it was, but the
    block's weights are not finite (a broken quantiser's output)."""
    from q25deploy.model.gguf import GGUFFile

    with GGUFFile(str(src)) as f:
        t = next(t for t in f.tensors if t.name == tensor)
        at = t.data_offset + SCALE_HIGH_BYTE[t.type_name] - 1
    data = bytearray(open(src, "rb").read())
    data[at : at + 2] = value
    with open(dst, "wb") as out:
        out.write(data)
