#!/usr/bin/env python3
"""Dequantization speed, side by side in one run on the same machine and the same model: the C
runtime's q25_dequantize (the library sources built as the Makefile builds q25tok_dequant.c:
-O2 -fno-fast-math -ffp-contract=off, called through ctypes, one thread) against gguf-py's
gguf.quants.dequantize (numpy, one thread), over every tensor of a Qwen2.5 0.5B-shaped model
(python3 -m q25deploy.model.synthetic --preset 0.5b), in the same block-aligned chunks. Both
results are compared bit for bit (NaN by class, see tests/runtime/test_dequant.py). Goal: C
at least 5x numpy.

    python3 bench/bench_dequant.py [MODEL.gguf]   (default: writes the 0.5B model to a temp dir)
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import numpy as np  # noqa: E402
from gguf import GGML_QUANT_SIZES  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

from q25deploy.model.gguf import GGUFFile  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402
from q25deploy.resources import runtime_library_sources, runtime_sources  # noqa: E402

VOCAB = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"
CHUNK = 1 << 22  # elements per call (both sides): bounds numpy's temporaries


def build_library(tmp: Path) -> ctypes.CDLL:
    so = tmp / "libq25tok.so"
    subprocess.run(
        [
            "cc",
            "-std=c11",
            "-O2",
            "-fno-fast-math",
            "-ffp-contract=off",
            "-fPIC",
            "-shared",
            "-I",
            str(runtime_sources()),
            *map(str, runtime_library_sources()),
            "-o",
            str(so),
        ],
        check=True,
    )
    lib = ctypes.CDLL(str(so))
    lib.q25_dequantize.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.q25_dequantize.restype = ctypes.c_int
    return lib


def same(got: np.ndarray, ref: np.ndarray) -> bool:
    g, r = got.view(np.uint32), np.ascontiguousarray(ref, np.float32).reshape(-1).view(np.uint32)
    nan = ((g & 0x7FFFFFFF) > 0x7F800000) & ((r & 0x7FFFFFFF) > 0x7F800000)
    return bool(((g == r) | nan).all())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="a GGUF (default: the 0.5B-shaped synthetic model)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = Path(a.model) if a.model else tmp / "qwen25-0.5b.gguf"
        if not a.model:
            write_model(model, "0.5b", str(VOCAB))
        lib = build_library(tmp)
        data = np.memmap(model, np.uint8, "r")
        out = np.empty(CHUNK, np.float32)
        rows: dict[str, list[float]] = {}  # type -> [elements, numpy s, C s]
        mismatches = 0
        with GGUFFile(model) as f:
            for t in f.tensors:
                qtype = Q(t.ggml_type)
                blk_n, blk_b = GGML_QUANT_SIZES[qtype]
                per = CHUNK // blk_n * blk_b
                r = rows.setdefault(t.type_name, [0, 0.0, 0.0])
                for start in range(t.data_offset, t.data_offset + t.nbytes, per):
                    chunk = data[start : min(start + per, t.data_offset + t.nbytes)]
                    n = len(chunk) // blk_b * blk_n
                    t0 = time.perf_counter()
                    with np.errstate(all="ignore"):
                        ref = dequantize(chunk, qtype)
                    t1 = time.perf_counter()
                    rc = lib.q25_dequantize(t.ggml_type, chunk.ctypes.data, n, out.ctypes.data)
                    t2 = time.perf_counter()
                    assert rc == 0
                    mismatches += not same(out[:n], ref)
                    r[0] += n
                    r[1] += t1 - t0
                    r[2] += t2 - t1
    total = [sum(r[i] for r in rows.values()) for i in range(3)]
    print(f"{model.name}: {int(total[0]):,} values, {len(rows)} types, one thread each side\n")
    print(f"{'type':6} {'values':>13} {'numpy s':>9} {'C s':>8} {'numpy M/s':>10} {'C M/s':>8} {'C/numpy':>8}")
    for name, (n, tn, tc) in sorted(rows.items()) + [("all", total)]:
        print(f"{name:6} {int(n):>13,} {tn:9.2f} {tc:8.3f} {n / tn / 1e6:10.1f} {n / tc / 1e6:8.1f} {tn / tc:7.1f}x")
    print(
        f"\nbit-exact: {'yes' if not mismatches else f'NO, {mismatches} chunks differ'}; "
        f"goal C >= 5x numpy: {'met' if total[1] / total[2] >= 5 else 'NOT met'}"
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
