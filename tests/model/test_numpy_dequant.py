"""q25deploy.model.dequant against gguf-py's ``dequantize``, bit for bit.

The reference forward pass's record must not change by a bit when its dequantiser does, and
the C runtime's ``q25_dequantize`` is checked against gguf-py: so every value, NaN and inf
included, must have gguf-py's bits. Random blocks put the f16 scales on the awkward values
(zero, subnormal, the largest, inf, quiet and signalling NaN of either sign) as well as
random ones; the tiny model's tensors go through :class:`Weights` whole and a row at a time.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as gguf_dequantize

from q25deploy.model.dequant import dequantize
from q25deploy.model.gguf import GGUFFile
from q25deploy.model.weights import Weights, dequantize_rows

# f16 bit patterns: +-0, smallest and largest subnormal, smallest normal, 1, largest finite,
# +-inf, quiet NaN, signalling NaN, NaN with a payload and the sign bit
SPECIAL_F16 = np.array(
    [0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE5A],
    np.uint16,
)
SCALE_OFFSETS = {Q.Q8_0: [0], Q.Q5_0: [0], Q.Q4_K: [0, 2], Q.Q6_K: [208]}  # where each block's f16s lie
TYPES = [Q.Q4_K, Q.Q5_0, Q.Q6_K, Q.Q8_0]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype == np.float32 and a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    )


def reference(raw: np.ndarray, qtype: Q) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(gguf_dequantize(raw, qtype), np.float32).reshape(-1)


def ours(raw: np.ndarray, qtype: Q, n_values: int | None = None) -> np.ndarray:
    with np.errstate(all="ignore"):
        return dequantize(raw, int(qtype), n_values)


def random_blocks(qtype: Q, n_blocks: int, seed: int) -> np.ndarray:
    """Random blocks, about half of whose f16 scales are one of :data:`SPECIAL_F16`."""
    rng = np.random.default_rng(seed)
    size = GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off in SCALE_OFFSETS[qtype]:
        special = rng.random(n_blocks) < 0.5
        values = rng.choice(SPECIAL_F16, n_blocks)
        blocks[special, off : off + 2] = values[special].view(np.uint8).reshape(-1, 2)
    return blocks.reshape(-1)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n_blocks", [1, 2, 7, 333, 4097])
def test_random_blocks_have_gguf_py_bits(qtype, n_blocks):
    raw = random_blocks(qtype, n_blocks, seed=n_blocks * 31 + int(qtype))
    want = reference(raw, qtype)
    got = ours(raw, qtype, n_blocks * GGML_QUANT_SIZES[qtype][0])
    assert same_bits(got, want)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_every_special_scale_in_every_position(qtype):
    """Every awkward f16 in every scale slot, with every other byte random: nothing left to chance."""
    size = GGML_QUANT_SIZES[qtype][1]
    offsets = SCALE_OFFSETS[qtype]
    rng = np.random.default_rng(int(qtype))
    pairs = np.array(np.meshgrid(*[np.arange(len(SPECIAL_F16))] * len(offsets))).reshape(len(offsets), -1).T
    blocks = rng.integers(0, 256, (len(pairs), size), dtype=np.uint8)
    for i, off in enumerate(offsets):
        blocks[:, off : off + 2] = SPECIAL_F16[pairs[:, i]].view(np.uint8).reshape(-1, 2)
    raw = blocks.reshape(-1)
    assert same_bits(ours(raw, qtype), reference(raw, qtype))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_extreme_quants(qtype):
    """Quant bytes all zero and all ones (the smallest and largest quants, all high bits set)."""
    size = GGML_QUANT_SIZES[qtype][1]
    for fill in (0x00, 0xFF, 0x55, 0xAA):
        blocks = np.full((5, size), fill, np.uint8)
        for off in SCALE_OFFSETS[qtype]:
            blocks[:, off : off + 2] = (
                np.array([0x3C00, 0x7BFF, 0x0001, 0xBC00, 0x2E66], np.uint16).view(np.uint8).reshape(-1, 2)
            )
        raw = blocks.reshape(-1)
        assert same_bits(ours(raw, qtype), reference(raw, qtype))


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16], ids=lambda t: t.name)
def test_float_types(qtype):
    raw = np.random.default_rng(5).integers(0, 256, 4 * 333, dtype=np.uint8)
    raw[:8] = np.array([0x7C01, 0xFC00, 0x7E00, 0x0001], np.uint16).view(np.uint8)
    assert same_bits(ours(raw, qtype), reference(raw, qtype))


def test_other_types_go_to_gguf_py():
    raw = np.random.default_rng(6).integers(0, 256, GGML_QUANT_SIZES[Q.Q5_K][1] * 9, dtype=np.uint8)
    assert same_bits(ours(raw, Q.Q5_K), reference(raw, Q.Q5_K))


def test_a_strided_or_2d_input_is_read_as_its_bytes():
    raw = random_blocks(Q.Q5_0, 64, seed=7)
    want = reference(raw, Q.Q5_0)
    assert same_bits(ours(raw.reshape(8, -1), Q.Q5_0), want)
    doubled = np.repeat(raw, 2)[::2]  # the same bytes, not contiguous
    assert same_bits(ours(doubled, Q.Q5_0), want)


def test_wrong_sizes_are_refused():
    raw = random_blocks(Q.Q8_0, 3, seed=8)
    with pytest.raises(ValueError, match="not whole"):
        ours(raw[:-1], Q.Q8_0)
    with pytest.raises(ValueError, match="not 95"):
        ours(raw, Q.Q8_0, 95)


def test_the_tiny_models_tensors_have_gguf_py_bits(qwen25_tiny):
    """Every tensor of the tiny model (F32, Q4_K, Q5_0, Q6_K, Q8_0), whole through
    :meth:`Weights.get` and in chunks and single rows through ``dequantize_rows``."""
    with GGUFFile(qwen25_tiny) as f:
        w = Weights(f)
        types = set()
        for t in f.tensors:
            types.add(Q(t.ggml_type))
            raw = np.frombuffer(f.read(t, 0, t.nbytes), np.uint8)
            want = reference(raw, Q(t.ggml_type)).reshape(-1, t.shape[0])
            assert same_bits(w.get(t.name).reshape(-1, t.shape[0]), want), t.name
            rows = want.shape[0]
            for r in sorted({0, rows // 2, rows - 1}):
                assert same_bits(dequantize_rows(f, t, r, r + 1), want[r : r + 1]), (t.name, r)
            if rows > 3:
                assert same_bits(dequantize_rows(f, t, 1, rows - 1), want[1 : rows - 1]), t.name
    assert {Q.F32, Q.Q4_K, Q.Q5_0, Q.Q6_K, Q.Q8_0} <= types
