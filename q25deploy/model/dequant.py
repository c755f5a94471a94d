"""GGUF blocks to float32 with the bits of gguf-py's ``gguf.quants.dequantize``, faster.

The reference forward pass dequantises every matrix once per recording (:mod:`.weights`), and
gguf-py's dequantisers spend most of their time on temporaries (a uint32 shift of every high
bit against a 32-wide table, float32 copies of every nibble). Here Q4_K, Q5_0, Q6_K and Q8_0
are unpacked eight bytes at a time (nibbles and bit pairs masked in uint64 words), with
``np.unpackbits`` and with copies that move a block's field or run as one element, and
each value is then computed with gguf-py's float32 arithmetic, the same operations on the same
operands in the same order (so the same rounding, the same NaN and inf bits):

- Q8_0: ``float32(q) * d``; Q5_0: ``d * float32(q - 16)``, ``d`` the block's f16 scale as float32;
- Q4_K: ``(d * float32(sc)) * float32(q) - dmin * float32(m)`` per sub-block of 32;
- Q6_K: ``(d * float32(sc)) * float32(q - 32)`` per sub-block of 16 (``sc`` an int8).

F32 and F16 are gguf-py's own views and casts; every other type goes to gguf-py. A machine that
is not little-endian goes to gguf-py too (its Q5_0 reads the high bits as a native uint32).
"""

from __future__ import annotations

import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as _quants

F32, F16 = GGMLQuantizationType.F32, GGMLQuantizationType.F16
Q4_K, Q5_0, Q6_K, Q8_0 = (
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q6_K,
    GGMLQuantizationType.Q8_0,
)
QK_K = 256


def _field(blocks: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Bytes ``start:stop`` of each block, copied contiguous, shape (n_blocks, stop - start).
    The copy moves each block's field as one element (a structured view), not byte by byte."""
    n, size = blocks.shape
    field = np.dtype({"names": ["f"], "formats": [f"V{stop - start}"], "offsets": [start], "itemsize": size})
    return np.ascontiguousarray(blocks.reshape(-1).view(field)["f"]).view(np.uint8).reshape(n, stop - start)


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The f16 at byte ``start`` of each block as float32 (gguf-py's cast), shape (n_blocks, 1)."""
    return _field(blocks, start, start + 2).view(np.float16).astype(np.float32)


def _interleave(q: np.ndarray, parts: list[np.ndarray], width: int) -> None:
    """Fill ``q`` (n_blocks, k * len(parts) * width bytes) with runs of ``width`` bytes taken
    from each part (n_blocks, k * width) in turn: run ``j`` of part ``i`` becomes run
    ``j * len(parts) + i``. Each run is copied as one element."""
    n, step = q.shape[0], len(parts)
    runs = q.view(f"V{width}").reshape(n, -1)
    for i, part in enumerate(parts):
        runs[:, i::step] = part.view(f"V{width}").reshape(n, -1)


def _spread(x: np.ndarray, width: int) -> np.ndarray:
    """Each value of ``x`` (n_blocks, k) ``width`` times over: shape (n_blocks, k * width).
    A multiplication by the spread scales runs over whole rows, where one broadcasting the
    scales would run a short loop per sub-block."""
    return np.repeat(x, width, axis=1)


def _as_f32(q: np.ndarray) -> np.ndarray:
    """Quants (uint8 or int8) as float32: exact, as gguf-py's ``astype(np.float32)``."""
    return q.astype(np.float32)


_NIB = np.uint64(0x0F0F0F0F0F0F0F0F)
_FOUR = np.uint64(4)


def _nibbles(packed: np.ndarray) -> list[np.ndarray]:
    """Low and high nibbles of ``packed`` (n_blocks, 8k bytes), eight bytes per uint64 op."""
    words = packed.view(np.uint64)
    return [(words & _NIB).view(np.uint8), ((words >> _FOUR) & _NIB).view(np.uint8)]


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks, 0)
    out = _as_f32(_field(blocks, 2, 34).view(np.int8))
    np.multiply(out, _spread(d, 32), out=out)  # gguf-py: x * d
    return out


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    q = np.empty((n, 32), np.uint8)  # value j < 16: low nibble of qs[j]; j >= 16: high of qs[j - 16]
    _interleave(q, _nibbles(_field(blocks, 6, 22)), 16)
    high = np.unpackbits(_field(blocks, 2, 6), axis=-1, bitorder="little")  # bit j of the uint32 qh
    # q - 16 as int8 is the nibble with 0xF0 over it where the high bit is 0, and the nibble alone where it is 1
    np.subtract(high, np.uint8(1), out=high)
    np.bitwise_and(high, np.uint8(0xF0), out=high)
    np.bitwise_or(q, high, out=q)
    out = _as_f32(q.view(np.int8))
    np.multiply(_spread(d, 32), out, out=out)  # gguf-py: d * float32(q - 16)
    return out


_LOW6, _HIGH2 = np.uint32(0x3F3F3F3F), np.uint32(0x30303030)
_LOW4 = np.uint32(0x0F0F0F0F)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    dmin = _f16(blocks, 2)
    # gguf-py's get_scale_min, four 6-bit scales or mins at a time in a little-endian uint32
    s = _field(blocks, 4, 16).view(np.uint32)
    a, b, c = s[:, 0], s[:, 1], s[:, 2]
    sc = np.empty((n, 2), np.uint32)
    mn = np.empty((n, 2), np.uint32)
    np.bitwise_and(a, _LOW6, out=sc[:, 0])
    np.bitwise_or(c & _LOW4, (a >> np.uint32(2)) & _HIGH2, out=sc[:, 1])
    np.bitwise_and(b, _LOW6, out=mn[:, 0])
    np.bitwise_or((c >> np.uint32(4)) & _LOW4, (b >> np.uint32(2)) & _HIGH2, out=mn[:, 1])
    scale = np.multiply(d, sc.view(np.uint8), dtype=np.float32)  # gguf-py: d * float32(sc)
    dm = np.multiply(dmin, mn.view(np.uint8), dtype=np.float32)  # and dmin * float32(m)
    q = np.empty((n, 256), np.uint8)  # 4 runs of 32 bytes: their low nibbles, then their high
    _interleave(q, _nibbles(_field(blocks, 16, 144)), 32)
    out = _as_f32(q)
    np.multiply(_spread(scale, 32), out, out=out)  # gguf-py: scale * float32(q) - dm
    np.subtract(out, _spread(dm, 32), out=out)
    return out


_H = np.uint64(0x3030303030303030)
_TWO = np.uint64(2)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _f16(blocks, 208)
    scale = np.multiply(d, _field(blocks, 192, 208).view(np.int8), dtype=np.float32)  # gguf-py: d * float32(sc)
    q = np.empty((n, 256), np.uint8)  # 2 halves of 64 bytes: low nibbles, then high
    _interleave(q, _nibbles(_field(blocks, 0, 128)), 64)
    qh = _field(blocks, 128, 192).view(np.uint64)
    high = np.empty((n, 256), np.uint8)  # 2 halves of 32 bytes: bits 0-1, 2-3, 4-5, 6-7, at bits 4-5
    parts = [(qh << _FOUR) & _H, (qh << _TWO) & _H, qh & _H, (qh >> _TWO) & _H]
    _interleave(high, [p.view(np.uint8) for p in parts], 32)
    np.bitwise_or(q, high, out=q)
    np.subtract(q, np.uint8(32), out=q)  # wraps to q - 32 as int8
    out = _as_f32(q.view(np.int8))
    np.multiply(_spread(scale, 16), out, out=out)  # gguf-py: scale * float32(q - 32)
    return out


_BLOCKS = {Q8_0: _q8_0, Q5_0: _q5_0, Q4_K: _q4_k, Q6_K: _q6_k}


def dequantize(raw: np.ndarray, ggml_type: int, n_values: int | None = None) -> np.ndarray:
    """``raw`` (uint8, whole blocks of ``ggml_type``) as a flat float32 array of the values
    gguf-py's ``dequantize`` gives, bit for bit; ``n_values``, when given, is checked against
    the blocks' count. NaN and inf scales give NaN and inf values as in gguf-py, without
    numpy's floating-point warnings (silenced as :func:`.weights.dequantize_rows` does)."""
    qtype = GGMLQuantizationType(ggml_type)
    raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)
    block, size = GGML_QUANT_SIZES[qtype]
    if raw.size % size:
        raise ValueError(f"{raw.size} bytes are not whole {qtype.name} blocks of {size} bytes")
    n_blocks = raw.size // size
    if n_values is not None and n_values != n_blocks * block:
        raise ValueError(f"{raw.size} bytes of {qtype.name} hold {n_blocks * block} values, not {n_values}")
    fn = _BLOCKS.get(qtype) if sys.byteorder == "little" else None
    if qtype == F32:
        return raw.view(np.float32)
    if qtype == F16:
        return raw.view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):  # NaN/inf scales stay NaN/inf, as on the board
        if fn is None:
            return np.asarray(_quants.dequantize(raw, qtype), np.float32).reshape(-1)
        return fn(raw.reshape(n_blocks, size)).reshape(-1)
