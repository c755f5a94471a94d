"""Qwen2.5's forward pass (llama.cpp's ``qwen2`` graph) in numpy float32: the host reference
the board's ``q25tok generate`` is compared with. The graph, op by op and in the order the
arithmetic is done, is in docs/forward.md; the code follows it line for line.

Weights come dequantised from :class:`~q25deploy.model.weights.Weights`. :meth:`Forward.eval`
runs several sequences in lock step, layer by layer and weight by weight, so each weight is
dequantised once per step whatever the number of sequences, a chunk of rows at a time
(:meth:`~q25deploy.model.weights.Weights.products`): no matrix is ever whole in memory, and
the build's peak memory does not grow with the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import UsageError
from .hparams import HParams
from .weights import Weights

F32 = np.float32
# a hook that sees every activation: (layer or -1 outside the layers, name, array (tokens, ...))
Capture = Callable[[int, str, np.ndarray], None]


@dataclass
class KVCache:
    """One sequence's keys and values, per layer: (n_head_kv, n_ctx, head_dim) float32."""

    k: list[np.ndarray]
    v: list[np.ndarray]
    n: int = 0  # positions filled

    @classmethod
    def empty(cls, hp: HParams, n_ctx: int) -> KVCache:
        shape = (hp.n_head_kv, n_ctx, hp.head_dim)
        return cls([np.zeros(shape, F32) for _ in range(hp.n_layer)], [np.zeros(shape, F32) for _ in range(hp.n_layer)])


@dataclass
class Result:
    """The last evaluated position of one sequence: its logits and the summarised states
    (``embd``, one per layer, ``output``: docs/forward.md)."""

    logits: np.ndarray
    embd: np.ndarray
    layers: list[np.ndarray] = field(default_factory=list)
    output: np.ndarray | None = None


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``(x * (1 / sqrt(mean(x²) + eps))) * w``, the sum of squares in float64 (as ggml)."""
    x64 = x.astype(np.float64)
    mean = (np.sum(x64 * x64, axis=-1, keepdims=True) / x.shape[-1]).astype(F32)
    scale = F32(1.0) / np.sqrt(mean + F32(eps))
    return (x * scale) * w


def rope_tables(hp: HParams, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``p * base^(-2i/n_rot)`` (computed in float64, rounded to float32),
    shape (tokens, n_rot/2)."""
    i = np.arange(hp.n_rot // 2, dtype=np.float64)
    theta = positions.astype(np.float64)[:, None] * np.power(float(hp.rope_freq_base), -2.0 * i / hp.n_rot)
    return np.cos(theta).astype(F32), np.sin(theta).astype(F32)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, n_rot: int) -> np.ndarray:
    """NEOX rotation of every head of ``x`` (tokens, heads, head_dim): the pair
    ``(x[i], x[i + n_rot/2])`` → ``(x[i]·cos − x[i+h]·sin, x[i]·sin + x[i+h]·cos)``."""
    h = n_rot // 2
    a, b = x[..., :h], x[..., h:n_rot]
    c, s = cos[:, None, :], sin[:, None, :]
    out = x.copy()
    out[..., :h] = a * c - b * s
    out[..., h:n_rot] = a * s + b * c
    return out


def softmax(s: np.ndarray) -> np.ndarray:
    """Max-subtracted, the sum in float64, then multiplied by float32(1/sum) (as ggml)."""
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    total = np.sum(e.astype(np.float64), axis=-1, keepdims=True)
    return e * (1.0 / total).astype(F32)


def attention(q: np.ndarray, cache: KVCache, layer: int, positions: np.ndarray, hp: HParams) -> np.ndarray:
    """Causal grouped-query attention of ``q`` (tokens, n_head, head_dim) over the cache's
    first ``positions[-1] + 1`` positions, head by head (query head ``h`` reads KV head
    ``h // (n_head / n_head_kv)``); the heads concatenated (tokens, n_embd)."""
    n = int(positions[-1]) + 1
    group = hp.n_head // hp.n_head_kv
    scale = F32(1.0 / np.sqrt(hp.head_dim))
    visible = np.arange(n)[None, :] <= positions[:, None]  # (tokens, n)
    out = np.empty_like(q)
    for h in range(hp.n_head):
        k, v = cache.k[layer][h // group, :n], cache.v[layer][h // group, :n]
        s = np.matmul(np.ascontiguousarray(q[:, h]), k.T) * scale  # (tokens, n)
        out[:, h] = np.matmul(softmax(np.where(visible, s, F32(-np.inf))), v)
    return out.reshape(len(positions), hp.n_embd)


def silu(z: np.ndarray) -> np.ndarray:
    return z / (F32(1.0) + np.exp(-z))


class Forward:
    """The model: hyperparameters and lazily dequantised weights."""

    def __init__(self, weights: Weights, hp: HParams) -> None:
        self.w = weights
        self.hp = hp

    def eval(self, seqs: list[tuple[list[int], KVCache]], capture: Capture | None = None) -> list[Result]:
        """Append each sequence's tokens to its cache and run them; the result of each
        sequence's last token. ``capture`` sees every activation (single sequence only)."""
        return [rs[-1] for rs in self.eval_last(seqs, 1, capture)]

    def eval_last(
        self, seqs: list[tuple[list[int], KVCache]], last: int, capture: Capture | None = None
    ) -> list[list[Result]]:
        """As :meth:`eval`, with the results of each sequence's last ``last`` tokens (in order):
        every position's arithmetic is its own, so a token's result is the same whichever
        positions are reported with it (teacher forcing: one pass gives every position's)."""
        hp, w = self.hp, self.w
        if capture is not None and len(seqs) != 1:
            raise ValueError("capture works on one sequence")
        note = capture or (lambda layer, name, a: None)
        xs, pos = [], []
        for ids, cache in seqs:
            if not ids or cache.n + len(ids) > cache.k[0].shape[1]:
                raise UsageError(f"{len(ids)} tokens after {cache.n} do not fit a context of {cache.k[0].shape[1]}")
            if not 1 <= last <= len(ids):
                raise ValueError(f"{last} results of {len(ids)} tokens")
            xs.append(w.rows("token_embd.weight", list(ids)))
            pos.append(np.arange(cache.n, cache.n + len(ids)))
        results = [[Result(np.empty(0, F32), row.copy()) for row in x[-last:]] for x in xs]
        note(-1, "embd", xs[0])
        caches = [cache for _, cache in seqs]
        for layer in range(hp.n_layer):
            xs = self._block(layer, xs, pos, caches, note)
            for rs, x in zip(results, xs):
                for r, row in zip(rs, x[-last:]):
                    r.layers.append(row.copy())
        for cache, p in zip(caches, pos):
            cache.n = int(p[-1]) + 1
        norm = w.get("output_norm.weight")
        hs = [rmsnorm(x[-last:], norm, hp.rms_eps) for x in xs]
        logits = w.products("token_embd.weight" if hp.tied_output else "output.weight", hs)
        for rs, h, y in zip(results, hs, logits):
            for r, hrow, yrow in zip(rs, h, y):
                r.output, r.logits = hrow.copy(), yrow.copy()
        note(-1, "output_norm", rmsnorm(xs[0], norm, hp.rms_eps))
        note(-1, "logits", results[0][-1].logits[None, :])
        return results

    def _block(
        self, layer: int, xs: list[np.ndarray], pos: list[np.ndarray], caches: list[KVCache], note
    ) -> list[np.ndarray]:
        """One layer on every sequence, each weight applied to all of them before the next is
        dequantised (the weight cache then needs to hold one tensor, not the model); every
        sequence's arithmetic is its own, whatever the others."""
        hp, w, p = self.hp, self.w, f"blk.{layer}."

        def lin(hs: list[np.ndarray], name: str, bias: str | None = None) -> list[np.ndarray]:
            """``h @ W.T (+ b)`` for each ``h``: W is (n_out, n_in) as the GGUF stores rows."""
            return w.products(p + name, hs, w.get(p + bias) if bias else None)

        def norm(hs: list[np.ndarray], name: str) -> list[np.ndarray]:
            weight = w.get(p + name)
            return [rmsnorm(h, weight, hp.rms_eps) for h in hs]

        note(layer, "input", xs[0])
        hs = norm(xs, "attn_norm.weight")
        note(layer, "attn_norm", hs[0])
        qs = lin(hs, "attn_q.weight", "attn_q.bias")
        ks = lin(hs, "attn_k.weight", "attn_k.bias")
        vs = lin(hs, "attn_v.weight", "attn_v.bias")
        note(layer, "q", qs[0])
        note(layer, "k", ks[0])
        note(layer, "v", vs[0])
        attn = []
        for q, k, v, positions, cache in zip(qs, ks, vs, pos, caches):
            t = len(positions)
            cos, sin = rope_tables(hp, positions)
            q = rope(q.reshape(t, hp.n_head, hp.head_dim), cos, sin, hp.n_rot)
            k = rope(k.reshape(t, hp.n_head_kv, hp.head_dim), cos, sin, hp.n_rot)
            note(layer, "q_rope", q.reshape(t, -1))
            note(layer, "k_rope", k.reshape(t, -1))
            cache.k[layer][:, positions] = k.transpose(1, 0, 2)
            cache.v[layer][:, positions] = v.reshape(t, hp.n_head_kv, hp.head_dim).transpose(1, 0, 2)
            attn.append(attention(q, cache, layer, positions, hp))
        note(layer, "attn", attn[0])
        xs = [x + y for x, y in zip(xs, lin(attn, "attn_output.weight"))]
        note(layer, "attn_residual", xs[0])
        hs = norm(xs, "ffn_norm.weight")
        note(layer, "ffn_norm", hs[0])
        gates = [silu(g) for g in lin(hs, "ffn_gate.weight")]
        gs = [g * u for g, u in zip(gates, lin(hs, "ffn_up.weight"))]
        note(layer, "ffn_hidden", gs[0])
        xs = [x + y for x, y in zip(xs, lin(gs, "ffn_down.weight"))]
        note(layer, "output", xs[0])
        return xs
