"""The step record's top logits (q25deploy/model/generate.py)."""

from __future__ import annotations

import numpy as np
import pytest

from q25deploy.model.generate import top


def ranked(logits: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The definition: every id sorted by value descending, the lower id first on a tie, NaN last."""
    key = [(-float(v) if not np.isnan(v) else np.inf, i) for i, v in enumerate(logits)]
    return [(i, float(logits[i])) for _, i in sorted(key)[:k]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_top_is_the_full_ranking_cut_at_k_ties_nan_and_infinities_included(dtype):
    rng = np.random.default_rng(7)
    for trial in range(2000):
        n = int(rng.integers(1, 30))
        logits = rng.integers(-2, 3, n).astype(dtype)  # few distinct values: ties at the cut
        for special, every in ((np.nan, 3), (np.inf, 5), (-np.inf, 4)):
            if trial % every == 0:
                logits[rng.random(n) < 0.3] = special
        k = int(rng.integers(1, 8))
        assert repr(top(logits, k)) == repr(ranked(logits, k)), (logits, k)


def test_a_vocabulary_sized_row_keeps_the_lower_id_on_a_tie():
    logits = np.zeros(151936, np.float32)
    logits[[90000, 5, 151935]] = 3.0
    logits[7] = np.nan
    assert top(logits, 4) == [(5, 3.0), (90000, 3.0), (151935, 3.0), (0, 0.0)]
