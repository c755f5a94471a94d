"""The activations as a product with a quantised matrix sees them: llama.cpp's CPU backend
quantises the vector too (docs/forward.md, "Activations"), and so do the reference and the
board's ``q25tok`` (``q25tok_qrow.c``), so that both compute the same real-number products.

- Q5_0 and Q8_0 weights: Q8_0, blocks of 32, ``d = amax / 127`` (float32), ``q = rint(x / d)``
  (as ``x * (1 / d)``, ties to even), ``d`` kept as float16.
- Q4_K and Q6_K weights: Q8_K, blocks of 256, ``iscale = -127 / v`` with ``v`` the first value
  of the largest magnitude, ``q = min(127, rint(iscale * x))``, ``d = 1 / iscale`` (float32).
- Any other type: the float32 values, unchanged.

A block holding an infinity or a NaN becomes NaN throughout (``q25tok`` gives it d = NaN).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

F32 = np.float32
Q8_0_TYPES = frozenset({Q.Q5_0, Q.Q8_0})
Q8_K_TYPES = frozenset({Q.Q4_K, Q.Q6_K})


def _q8_0(b: np.ndarray) -> np.ndarray:
    d = np.abs(b).max(axis=1) / F32(127)
    inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)  # through(): division warnings off
    q = np.clip(np.rint(b * inv[:, None]), -128, 127)
    return (q * d.astype(np.float16).astype(F32)[:, None]).astype(F32)


def _q8_k(b: np.ndarray) -> np.ndarray:
    big = b[np.arange(len(b)), np.argmax(np.abs(b), axis=1)]
    iscale = np.where(big != 0, F32(-127) / big, F32(0)).astype(F32)
    q = np.clip(np.minimum(127, np.rint(iscale[:, None] * b)), -128, 127)
    d = np.where(iscale != 0, F32(1) / iscale, F32(0)).astype(F32)
    return (q * d[:, None]).astype(F32)


def through(x: np.ndarray, ggml_type: int) -> np.ndarray:
    """``x`` (rows of a matrix's ``ne0`` values, float32) as int8 times its blocks' scales, in
    the activation format of a ``ggml_type`` matrix; ``x`` itself for a float32 product."""
    if ggml_type in Q8_0_TYPES:
        per, rounded = 32, _q8_0
    elif ggml_type in Q8_K_TYPES:
        per, rounded = 256, _q8_k
    else:
        return x
    b = np.ascontiguousarray(x, dtype=F32).reshape(-1, per)
    with np.errstate(all="ignore"):
        out = rounded(b)
    out[~np.isfinite(b).all(axis=1)] = np.nan
    return out.reshape(x.shape)
