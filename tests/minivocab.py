"""A small but real byte-level BPE vocabulary: the first ids and merges of the Qwen2.5
tokenizer (closed under merges) plus its 22 added tokens renumbered after them. Images of it
are ~60 KB, for fuzzing and quick C API tests."""

from __future__ import annotations

import numpy as np

from q25deploy.model.gguf import GGUFFile
from q25deploy.model.synthetic import QWEN25_ADDED
from q25deploy.tokenizer.vocab import Vocab, effective_types, vocab_from_gguf


def mini_vocab(vocab_gguf, n_tokens: int = 1200) -> Vocab:
    with GGUFFile(vocab_gguf) as f:
        full = vocab_from_gguf(f)
    keep = np.all(full.merges[:, :3] < n_tokens, axis=1)
    merges = full.merges[keep].copy()
    merges[:, 3] = np.arange(len(merges), dtype=np.uint32)
    merge_texts = [t for t, k in zip(full.merge_texts, keep.tolist()) if k]
    texts = list(full.texts[:n_tokens]) + [t.encode() for _, t, _ in QWEN25_ADDED]
    raw = list(full.raw[:n_tokens]) + [t.encode() for _, t, _ in QWEN25_ADDED]
    gguf_types = np.concatenate([full.gguf_types[:n_tokens], [ty for _, _, ty in QWEN25_ADDED]]).astype(np.uint16)
    eos = n_tokens + 2
    return Vocab(
        model="gpt2",
        pre="qwen2",
        texts=texts,
        raw=raw,
        types=effective_types(texts, gguf_types, {}),
        gguf_types=gguf_types,
        merges=merges,
        merge_texts=merge_texts,
        bos=n_tokens,
        eos=eos,
        pad=n_tokens,
        add_bos=False,
        chat_template=None,
    )
