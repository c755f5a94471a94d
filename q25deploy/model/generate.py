"""The host reference's steps on a prompt, and what is recorded of each: the token, the top
logits, and a digest-sized summary of the states (docs/forward.md). The forward record's steps
are teacher-forced (:func:`forced`): each prompt followed by a fixed continuation, every
position evaluated in one pass over the weights; :func:`greedy` feeds each step's token back."""

from __future__ import annotations

import math

import numpy as np

from .forward import Forward, KVCache, Result

STEPS = 8
TOP = 5


def top(logits: np.ndarray, k: int = TOP) -> list[tuple[int, float]]:
    """The ``k`` largest logits, descending, the lower id first on a tie (NaN ranks last)."""
    clean = np.where(np.isnan(logits), -np.inf, logits)
    n = len(clean)
    # every id at or above the k-th largest value (ties included), then only those sorted
    ids = np.flatnonzero(clean >= np.partition(clean, n - k)[n - k]) if n > k else np.arange(n)
    order = ids[np.lexsort((ids, -clean[ids].astype(np.float64)))][:k]
    return [(int(i), float(logits[i])) for i in order]


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def summary_indices(n_embd: int) -> list[int]:
    return [k * n_embd // 4 for k in range(4)]


def summary(v: np.ndarray) -> dict:
    """A state in a few numbers: its Euclidean norm (float64 sum of squares) and 4 values."""
    v64 = v.astype(np.float64)
    with np.errstate(all="ignore"):
        norm = float(np.sqrt(np.sum(v64 * v64)))
    return {"norm": _number(norm), "values": [_number(float(v[i])) for i in summary_indices(len(v))]}


def step_record(r: Result, position: int) -> dict:
    best = top(r.logits)
    margin = float(np.float32(best[0][1]) - np.float32(best[1][1])) if len(best) > 1 else 0.0
    assert r.output is not None
    return {
        "position": position,
        "token": best[0][0],
        "top": [[i, _number(v)] for i, v in best],
        "margin": _number(margin),
        "embd": summary(r.embd),
        "layers": [summary(x) for x in r.layers],
        "output": summary(r.output),
    }


def continuation(ids: list[int], steps: int) -> list[int]:
    """The ids fed after a prompt for its last ``steps - 1`` positions: the prompt's own ids
    again, from its start, as often as needed (a copy a trained model predicts with clear
    margins, in the vocabulary whatever the model; no pass is needed to choose it)."""
    if not ids:
        raise ValueError("an empty prompt has no continuation")
    return [ids[i % len(ids)] for i in range(steps - 1)]


def forced(fw: Forward, prompts: list[list[int]], continuations: list[list[int]]) -> list[list[dict]]:
    """Per prompt, a step record for its last position and each continuation id's, all prompts
    in one pass (each weight dequantised once): the step a greedy run would record where its
    tokens were the continuation's."""
    seqs = [ids + more for ids, more in zip(prompts, continuations, strict=True)]
    n = {len(more) for more in continuations}
    if len(n) != 1:
        raise ValueError("every prompt's continuation has the same length")
    last = n.pop() + 1
    caches = [KVCache.empty(fw.hp, len(x)) for x in seqs]
    runs = fw.eval_last(list(zip(seqs, caches)), last)
    return [[step_record(r, len(x) - last + s) for s, r in enumerate(rs)] for x, rs in zip(seqs, runs)]


def greedy(fw: Forward, prompts: list[list[int]], steps: int = STEPS) -> list[list[dict]]:
    """Per prompt, ``steps`` step records (greedy, no stop at EOS), the prompts run in lock step."""
    caches = [KVCache.empty(fw.hp, len(ids) + steps) for ids in prompts]
    feed = [list(ids) for ids in prompts]
    out: list[list[dict]] = [[] for _ in prompts]
    for _ in range(steps):
        results = fw.eval(list(zip(feed, caches)))
        for i, r in enumerate(results):
            rec = step_record(r, caches[i].n - 1)
            out[i].append(rec)
            feed[i] = [rec["token"]]
    return out
