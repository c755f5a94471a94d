"""``q25deploy export fixtures --forward PROMPT``: every layer's activations for one prompt,
from the host reference (docs/forward.md), as golden data for a whole-layer testbench.

The prompt is tokenised with the model's own tokenizer (special tokens parsed: a chat
template's ``<|im_start|>`` is one token) and run as one batch from position 0. Every
activation the graph names is written as float32 little-endian rows (one per token) into
``forward.f32``; ``fixtures.json`` indexes them under ``forward``.
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..model.forward import Forward, KVCache
from ..model.gguf import GGUFFile
from ..model.hparams import runnable
from ..model.weights import Weights
from .forward_record import fed_ids

FILE = "forward.f32"
MAX_TOKENS = 512
# what each activation is, for the index (docs/forward.md has the arithmetic)
MEANING = {
    "embd": "token embeddings: the input of layer 0",
    "input": "the layer's input (the residual stream)",
    "attn_norm": "rmsnorm(input) * attn_norm",
    "q": "Wq attn_norm + bq (before RoPE)",
    "k": "Wk attn_norm + bk (before RoPE)",
    "v": "Wv attn_norm + bv",
    "q_rope": "q after RoPE",
    "k_rope": "k after RoPE (what the KV cache holds)",
    "attn": "attention output, heads concatenated (before attn_output)",
    "attn_residual": "input + Wo attn",
    "ffn_norm": "rmsnorm(attn_residual) * ffn_norm",
    "ffn_hidden": "silu(Wgate ffn_norm) * (Wup ffn_norm)",
    "output": "the layer's output: attn_residual + Wdown ffn_hidden",
    "output_norm": "rmsnorm(last layer's output) * output_norm",
    "logits": "the output head's logits of the last token",
}


def prompt_ids(f: GGUFFile, prompt: str) -> list[int]:
    """The prompt's ids with the model's tokenizer (parse_special), BOS first if the model asks."""
    from ..tokenizer.codec import Codec
    from ..tokenizer.image.format import build_image
    from ..tokenizer.image.reader import open_image
    from ..tokenizer.vocab import vocab_from_gguf

    hp = runnable(f)
    ids = Codec(open_image(build_image(vocab_from_gguf(f)).data)).encode(prompt.encode("utf-8", "surrogatepass"), True)
    ids = fed_ids(hp, [ids])[0]
    if not 0 < len(ids) <= MAX_TOKENS:
        raise UsageError(f"--forward: the prompt is {len(ids)} tokens (1..{MAX_TOKENS} allowed)")
    return ids


def forward_activations(f: GGUFFile, prompt: str) -> tuple[dict, bytes]:
    """(the ``forward`` entry of fixtures.json, the bytes of ``forward.f32``)."""
    hp = runnable(f)
    ids = prompt_ids(f, prompt)
    chunks: list[bytes] = []
    entries: list[dict] = []
    offset = 0

    def keep(layer: int, name: str, a: np.ndarray) -> None:
        nonlocal offset
        data = np.ascontiguousarray(a, "<f4").tobytes()
        entries.append({"layer": None if layer < 0 else layer, "name": name, "shape": list(a.shape), "offset": offset})
        chunks.append(data)
        offset += len(data)

    Forward(Weights(f), hp).eval([(ids, KVCache.empty(hp, len(ids)))], capture=keep)
    entry = {
        "prompt": prompt,
        "ids": ids,
        "file": FILE,
        "dtype": "float32 little-endian, row-major (tokens first)",
        "meaning": MEANING,
        "activations": entries,
    }
    return entry, b"".join(chunks)
