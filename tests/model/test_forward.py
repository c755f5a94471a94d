"""The host reference forward pass against llama.cpp itself (llama-cpp-python, the CPU backend,
loading the very same GGUF with every logit kept).

Why a margin: for a quantised weight matrix llama.cpp's CPU backend quantises the activation
vector too (to Q8_K for the K-quants, to Q8_0 for Q5_0/Q8_0: int8 with one scale per block),
and keeps K and V in float16; the reference computes in float32 throughout. The per-element
rounding of Q8 is up to amax/254, which moves a dot product by a few tenths of a percent and
the logits by up to a few hundredths on these models. Where llama.cpp's top two logits are
closer than :data:`MARGIN`, either token is a correct answer of the graph, so only steps with a
clear margin must agree. The tokens are compared teacher-forced: llama.cpp evaluates the
prompt followed by the reference's tokens in one batch, so one unclear step does not decide
the context of the next ones.

Logits are also compared as a whole: the normalised mean squared error
``sum((ref - llama)^2) / sum(llama^2)`` of each step (test-backend-ops' measure) stays below
:data:`NMSE`.
"""

from __future__ import annotations

import numpy as np
import pytest
from requirements import need_module

from q25deploy.model.forward import Forward, KVCache
from q25deploy.model.gguf import GGUFFile
from q25deploy.model.hparams import runnable
from q25deploy.model.synthetic import write_model
from q25deploy.model.weights import Weights
from q25deploy.packer.forward_record import compute
from q25deploy.tokenizer.prompts import smoke_ids

MARGIN = 0.1  # logits; 2 x the largest |reference - llama.cpp| difference of a top logit seen, rounded up
NMSE = 5e-4  # test-backend-ops' bound for a matrix product, here for the whole model


@pytest.fixture(scope="module")
def llama_cpp():
    return need_module("llama_cpp", "pip install '.[reference]' builds llama-cpp-python")


@pytest.fixture(scope="module")
def untied(tmp_path_factory, vocab_gguf):
    p = tmp_path_factory.mktemp("models") / "qwen25-tiny-untied.gguf"
    write_model(p, "tiny-untied", str(vocab_gguf))
    return p


def llama_logits(llama_cpp, model, ids: list[int]) -> np.ndarray:
    """llama.cpp's logits of every position of ``ids``, evaluated in one batch."""
    llm = llama_cpp.Llama(
        model_path=str(model), n_ctx=256, n_batch=256, logits_all=True, n_threads=2, verbose=False, seed=0
    )
    try:
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], np.float32)
    finally:
        llm.close()


def reference_logits(fw: Forward, ids: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The reference's logits of each greedy step (the prompt, then one token at a time)."""
    cache = KVCache.empty(fw.hp, len(ids) + len(tokens))
    out, feed = [], ids
    for t in tokens:
        out.append(fw.eval([(feed, cache)])[0].logits)
        feed = [t]
    return out


def compare(llama_cpp, model, codec) -> dict:
    """Per step of every smoke prompt: tokens where llama.cpp's margin is clear, and the NMSE."""
    with GGUFFile(model) as f:
        rec = compute(f, "0" * 64, smoke_ids(codec))
        fw = Forward(Weights(f), runnable(f))
        clear = unclear = 0
        worst_nmse = worst_top = 0.0
        for p in rec["prompts"]:
            ids, tokens = p["ids"], p["tokens"]
            theirs = llama_logits(llama_cpp, model, ids + tokens[:-1])[len(ids) - 1 :]
            ours = reference_logits(fw, ids, tokens)
            for s, (a, b) in enumerate(zip(ours, theirs)):
                assert int(np.argmax(a)) == tokens[s]  # the record is the reference's own greedy path
                best = np.sort(b)[-2:]
                if best[1] - best[0] > MARGIN:
                    clear += 1
                    assert tokens[s] == int(np.argmax(b)), (p["text"][:30], s, best)
                else:  # either token may win: ours must be one of llama.cpp's near-ties
                    unclear += 1
                    assert b[tokens[s]] >= best[1] - MARGIN, (p["text"][:30], s, best, b[tokens[s]])
                worst_nmse = max(worst_nmse, float(np.sum((a - b) ** 2.0) / np.sum(b**2.0)))
                worst_top = max(worst_top, float(np.max(np.abs(a[np.argsort(b)[-5:]] - b[np.argsort(b)[-5:]]))))
    return {"clear": clear, "unclear": unclear, "nmse": worst_nmse, "top_diff": worst_top}


def check(result: dict) -> None:
    print(result)
    assert result["clear"] >= 0.75 * (result["clear"] + result["unclear"])  # most steps are decided
    assert result["nmse"] < NMSE
    assert 2 * result["top_diff"] < MARGIN  # the margin covers what was seen


def test_tiny_greedy_tokens_and_logits_match_llama_cpp(llama_cpp, qwen25_tiny, qwen25_codec):
    check(compare(llama_cpp, qwen25_tiny, qwen25_codec))


def test_untied_greedy_tokens_and_logits_match_llama_cpp(llama_cpp, untied, qwen25_codec):
    """3 layers of 256: Q4_K and Q6_K weights, a separate output.weight."""
    check(compare(llama_cpp, untied, qwen25_codec))


@pytest.mark.slow
def test_05b_greedy_tokens_and_logits_match_llama_cpp(llama_cpp, tmp_path, vocab_gguf, qwen25_codec):
    model = tmp_path / "qwen25-0.5b.gguf"
    write_model(model, "0.5b", str(vocab_gguf))
    check(compare(llama_cpp, model, qwen25_codec))
