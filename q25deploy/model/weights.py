"""A GGUF's tensors as float32 numpy arrays, dequantised lazily with the bits gguf-py gives
(``gguf.quants.dequantize``: the same bits as ``q25_dequantize`` on the board; the common
types by :mod:`.dequant`'s faster numpy, the rest by gguf-py itself).

The forward pass multiplies by a matrix a chunk of rows at a time (:meth:`Weights.products`,
every sequence with each chunk), so no matrix is ever whole in memory; vectors (norms, biases)
come whole from :meth:`Weights.get`, dequantised in chunks of rows (the dequantiser's temporaries are
several times the output) and kept in a least-recently-used cache bounded in bytes. Single rows
(an embedding lookup) are dequantised on their own.
"""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import GGUFError
from .activations import through
from .dequant import dequantize
from .gguf import GGUFFile, TensorInfo

M_TOP_PAD = -2  # glibc's mallopt parameter: bytes kept at the heap's top when it shrinks
HEAP_PAD = 64 << 20


def keep_heap_warm(pad: int = HEAP_PAD) -> None:
    """Ask glibc to keep ``pad`` bytes at the heap's top when it trims it. Dequantising and
    multiplying a chunk allocates and frees megabytes of temporaries; with glibc's defaults
    the heap gives them back to the kernel and faults them in again, chunk after chunk, which
    slows the forward pass several times over in a process whose heap has not grown before
    it. Resident memory is unchanged (pages are touched only when used).
    Elsewhere than glibc (musl's ``mallopt`` does nothing, macOS has none): nothing."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(M_TOP_PAD, pad)


DEFAULT_BUDGET = 0  # bytes of float32 kept dequantised beyond the tensor in use (Forward uses each once per step)
CHUNK_ELEMENTS = 1 << 20  # dequantise about 1 M values at a time (the dequantiser's temporaries are a few times that)


def row_bytes(t: TensorInfo) -> int:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(t.ggml_type)]
    return t.shape[0] // block * size


def dequantize_rows(f: GGUFFile, t: TensorInfo, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of ``t`` (a row is ``ne0`` values) as float32, shape (rows, ne0)."""
    rb, ne0 = row_bytes(t), t.shape[0]
    raw = np.frombuffer(f.read(t, start * rb, stop * rb), np.uint8)
    with np.errstate(all="ignore"):  # NaN/inf scales stay NaN/inf, as on the board
        values = dequantize(raw, t.ggml_type, (stop - start) * ne0)
    return values.reshape(stop - start, ne0)


class Weights:
    """The float32 tensors of one open GGUF file, by name."""

    def __init__(self, f: GGUFFile, budget: int = DEFAULT_BUDGET) -> None:
        keep_heap_warm()
        self.f = f
        self.budget = budget
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._held = 0

    def info(self, name: str) -> TensorInfo:
        return self.f.tensor(name)

    def n_rows(self, name: str) -> int:
        t = self.info(name)
        return t.n_elements // t.shape[0]

    def get(self, name: str) -> np.ndarray:
        """The whole tensor, shape (rows, ne0) (a vector: (ne0,)), float32, read-only."""
        hit = self._cache.get(name)
        if hit is not None:
            self._cache.move_to_end(name)
            return hit
        t = self.info(name)
        rows = t.n_elements // t.shape[0]
        out = np.empty((rows, t.shape[0]), np.float32)
        step = max(1, CHUNK_ELEMENTS // t.shape[0])
        for r in range(0, rows, step):
            out[r : r + step] = dequantize_rows(self.f, t, r, min(rows, r + step))
        whole: np.ndarray = out.reshape(t.shape[0]) if len(t.shape) == 1 else out
        whole.flags.writeable = False
        self._keep(name, whole)
        return whole

    def products(self, name: str, xs: list[np.ndarray], bias: np.ndarray | None = None) -> list[np.ndarray]:
        """``x @ W.T (+ bias)`` for each ``x`` (shape (tokens, ne0)), ``W = get(name)``, the matrix
        dequantised a chunk of rows at a time and never whole: the forward pass's peak memory is
        then a chunk and the dequantiser's temporaries, whatever the model's size (a 3B model's FFN
        matrices are 90 MB as float32, its output head 1.2 GB). Every ``x`` is multiplied at once
        (their rows stacked), and the next chunk is dequantised on a second thread while this one
        is multiplied (numpy releases the interpreter for both). BLAS blocks a chunk's sums as it
        would not the whole matrix's, so a product may round otherwise than the whole one (a
        float32 rounding, far inside record_compare's tolerances); the same chunks, the same
        bits, run after run."""
        t = self.info(name)
        xs = [through(x, t.ggml_type) for x in xs]
        hit = self._cache.get(name)
        if hit is not None:
            ys = [np.matmul(x, hit.T) for x in xs]
            return ys if bias is None else [y + bias for y in ys]
        rows = t.n_elements // t.shape[0]
        x = xs[0] if len(xs) == 1 else np.concatenate(xs)
        y = np.empty((x.shape[0], rows), np.float32)
        step = max(1, CHUNK_ELEMENTS // t.shape[0])
        with ThreadPoolExecutor(1) as pool:
            ahead = pool.submit(dequantize_rows, self.f, t, 0, min(rows, step))
            for r in range(0, rows, step):
                chunk = ahead.result()
                if r + step < rows:
                    ahead = pool.submit(dequantize_rows, self.f, t, r + step, min(rows, r + 2 * step))
                y[:, r : r + step] = np.matmul(x, chunk.T)
                if bias is not None:
                    y[:, r : r + step] += bias[r : r + step]
        return np.split(y, np.cumsum([len(x) for x in xs[:-1]])) if len(xs) > 1 else [y]

    def rows(self, name: str, ids: list[int]) -> np.ndarray:
        """Rows ``ids`` of a matrix (an embedding lookup), without dequantising the rest."""
        t = self.info(name)
        n = t.n_elements // t.shape[0]
        bad = [r for r in ids if not 0 <= r < n]
        if bad:
            raise GGUFError(f"{self.f.path}: token id {bad[0]} is outside {name} ({n} rows)")
        if name in self._cache:
            return np.array(self._cache[name][ids])
        out = np.empty((len(ids), t.shape[0]), np.float32)
        for i, r in enumerate(ids):
            out[i] = dequantize_rows(self.f, t, r, r + 1)[0]
        return out

    def _keep(self, name: str, a: np.ndarray) -> None:
        self._cache[name] = a
        self._held += a.nbytes
        while self._held > self.budget and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._held -= old.nbytes
