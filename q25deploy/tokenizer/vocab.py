"""The tokenizer as a GGUF stores it, turned into ids and raw bytes.

:func:`vocab_from_gguf` reads ``tokenizer.ggml.*`` and checks it is a byte-level BPE
("gpt2") vocabulary this tool can run; the result, :class:`Vocab`, is the single input of
every tokenizer asset (text assets, PS bundle, runtime image).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..common import gc_paused
from ..errors import TokenizerError
from ..model.gguf import GGUFFile, StringArray
from ..model.token_types import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED
from .bytelevel import decode_mapped

NO_TOKEN = 0xFFFFFFFF
SUPPORTED_PRE = ("qwen2",)

# llama.cpp (src/llama-vocab.cpp, load) ORs CONTROL into the attributes of tokens whose text
# names an end-of-generation or fill-in-the-middle token, whatever the GGUF says; so a
# USER_DEFINED "<|fim_prefix|>" is matched only with parse_special and rendered only with
# special output. EOG names always; a FIM category only when the GGUF does not give its id.
EOG_TEXTS = frozenset(
    t.encode()
    for t in (
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
        "[e~[",
    )
)
FIM_CATEGORIES: tuple[tuple[tuple[str, ...], frozenset[bytes]], ...] = tuple(
    (keys, frozenset(t.encode() for t in texts))
    for keys, texts in (
        (
            ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
            (
                "<|fim_prefix|>",
                "<fim-prefix>",
                "<fim_prefix>",
                "<\uff5cfim\u2581begin\uff5c>",
                "<PRE>",
                "\u2581<PRE>",
                "<|code_prefix|>",
                "<|prefix|>",
            ),
        ),
        (
            ("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
            (
                "<|fim_suffix|>",
                "<fim-suffix>",
                "<fim_suffix>",
                "<\uff5cfim\u2581hole\uff5c>",
                "<SUF>",
                "\u2581<SUF>",
                "<|code_suffix|>",
                "<|suffix|>",
            ),
        ),
        (
            ("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
            (
                "<|fim_middle|>",
                "<fim-middle>",
                "<fim_middle>",
                "<\uff5cfim\u2581end\uff5c>",
                "<MID>",
                "\u2581<MID>",
                "<|code_middle|>",
                "<|middle|>",
            ),
        ),
        (("tokenizer.ggml.fim_pad_token_id",), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
        (("tokenizer.ggml.fim_rep_token_id",), ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
        (("tokenizer.ggml.fim_sep_token_id",), ("<|file_sep|>",)),
        (("tokenizer.ggml.eot_token_id",), ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")),
        (("tokenizer.ggml.eom_token_id",), ("<|eom_id|>",)),
    )
)
FORCED_USER_DEFINED = frozenset(t.encode() for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"))


def effective_types(texts: list[bytes], gguf_types: np.ndarray, metadata: dict) -> np.ndarray:
    """Token types as llama.cpp uses them after its load-time overrides (see above)."""
    types = gguf_types.copy()
    control_texts = set(EOG_TEXTS)
    for keys, names in FIM_CATEGORIES:
        if not any(k in metadata for k in keys):
            control_texts |= names
    for i, t in enumerate(texts):
        if t in control_texts:
            types[i] = CONTROL
        if t in FORCED_USER_DEFINED:
            types[i] = USER_DEFINED
    return types


@dataclass(frozen=True)
class Vocab:
    """Token ids, raw token bytes, types and merges of one GGUF tokenizer."""

    model: str  # tokenizer.ggml.model
    pre: str  # tokenizer.ggml.pre
    texts: list[bytes]  # tokens as stored in the GGUF
    raw: list[bytes]  # NORMAL/BYTE ByteLevel-decoded, others their UTF-8 text
    types: np.ndarray  # uint16 per id: llama.cpp's effective types (see effective_types)
    gguf_types: np.ndarray  # uint16 per id, as stored in the GGUF
    merges: np.ndarray  # (n, 4) uint32: left id, right id, out id, rank
    merge_texts: list[bytes]  # as stored ("Ġ t")
    bos: int
    eos: int
    pad: int
    add_bos: bool
    chat_template: str | None

    @property
    def n_tokens(self) -> int:
        return len(self.texts)

    def special_ids(self) -> list[int]:
        """CONTROL, USER_DEFINED and UNKNOWN ids, longest text first, then by id."""
        ids = np.nonzero(np.isin(self.types, (CONTROL, USER_DEFINED, UNKNOWN)))[0].tolist()
        return sorted(ids, key=lambda i: (-len(self.raw[i]), i))


def _req(f: GGUFFile, key: str):
    try:
        return f.metadata[key]
    except KeyError:
        raise TokenizerError(f"{f.path}: no {key} (is this a model GGUF with a tokenizer?)") from None


def _opt_id(f: GGUFFile, key: str, n: int) -> int:
    v = f.metadata.get(key)
    if v is None:
        return NO_TOKEN
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
        raise TokenizerError(f"{f.path}: {key} = {v!r} is not a token id below {n}")
    return v


def vocab_from_gguf(f: GGUFFile) -> Vocab:
    """The byte-level BPE vocabulary of ``f``, checked to be one this tool can run."""
    with gc_paused():
        return _vocab(f)


def _vocab(f: GGUFFile) -> Vocab:
    model = _req(f, "tokenizer.ggml.model")
    if model != "gpt2":
        raise TokenizerError(f"{f.path}: tokenizer model {model!r} is not supported (need byte-level BPE 'gpt2')")
    pre = f.metadata.get("tokenizer.ggml.pre", "default")
    if pre not in SUPPORTED_PRE:
        raise TokenizerError(
            f"{f.path}: pre-tokenizer {pre!r} is not supported (supported: {', '.join(SUPPORTED_PRE)})"
        )
    tokens = _req(f, "tokenizer.ggml.tokens")
    if not isinstance(tokens, StringArray) or len(tokens) == 0:
        raise TokenizerError(f"{f.path}: tokenizer.ggml.tokens is not a non-empty string array")
    n = len(tokens)
    if n >= NO_TOKEN:
        raise TokenizerError(f"{f.path}: {n} tokens is more than a uint32 id can hold")
    texts = tokens.to_list()
    types = _gguf_token_types(f, n)
    raw = _raw_tokens(f, texts, types)
    merges, merge_texts = _merge_table(f, texts)
    template = f.metadata.get("tokenizer.chat_template")
    return Vocab(
        model=model,
        pre=pre,
        texts=texts,
        raw=raw,
        types=effective_types(texts, types, f.metadata),
        gguf_types=types,
        merges=merges,
        merge_texts=merge_texts,
        bos=_opt_id(f, "tokenizer.ggml.bos_token_id", n),
        eos=_opt_id(f, "tokenizer.ggml.eos_token_id", n),
        pad=_opt_id(f, "tokenizer.ggml.padding_token_id", n),
        add_bos=bool(f.metadata.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=template if isinstance(template, str) else None,
    )


def _gguf_token_types(f: GGUFFile, n: int) -> np.ndarray:
    """``tokenizer.ggml.token_type`` as uint16 (all NORMAL when absent), checked."""
    types_raw = f.metadata.get("tokenizer.ggml.token_type")
    if types_raw is None:
        return np.full(n, NORMAL, dtype=np.uint16)
    if not isinstance(types_raw, np.ndarray) or types_raw.dtype.kind not in "iu" or len(types_raw) != n:
        raise TokenizerError(f"{f.path}: tokenizer.ggml.token_type must be {n} integers")
    if types_raw.size and (types_raw.min() < 0 or types_raw.max() > BYTE):
        raise TokenizerError(f"{f.path}: tokenizer.ggml.token_type holds values outside 0..{BYTE}")
    return types_raw.astype(np.uint16)


def _raw_tokens(f: GGUFFile, texts: list[bytes], types: np.ndarray) -> list[bytes]:
    """Each token's bytes: NORMAL and BYTE tokens ByteLevel-decoded, the others as stored."""
    raw: list[bytes] = []
    for i, (t, ty) in enumerate(zip(texts, types.tolist())):
        if ty in (NORMAL, BYTE):
            raw.append(decode_mapped(t, i))
        else:
            raw.append(t)
        if len(raw[-1]) > 0xFFFF:
            raise TokenizerError(f"{f.path}: token {i} is longer than 65535 bytes")
    return raw


def _merge_table(f: GGUFFile, texts: list[bytes]) -> tuple[np.ndarray, list[bytes]]:
    """``tokenizer.ggml.merges`` as (n, 4) uint32 rows (left, right, out, rank), and as stored."""
    text_to_id = dict(zip(texts, range(len(texts))))  # llama.cpp: the last id of a duplicated text wins
    merges_sa = _req(f, "tokenizer.ggml.merges")
    if not isinstance(merges_sa, StringArray):
        raise TokenizerError(f"{f.path}: tokenizer.ggml.merges is not a string array")
    merge_texts = merges_sa.to_list()
    rows: list[tuple[int, int, int, int]] = []
    append = rows.append
    for rank, m in enumerate(merge_texts):
        left, sep, right = m.partition(b" ")
        if not sep or not left or not right:
            raise TokenizerError(f"{f.path}: merge #{rank} {m[:40]!r} is not 'left right'")
        try:
            append((text_to_id[left], text_to_id[right], text_to_id[left + right], rank))
        except KeyError:
            raise TokenizerError(
                f"{f.path}: merge #{rank} {m[:40]!r} names a token that is not in the vocabulary"
            ) from None
    return np.array(rows, dtype=np.uint32).reshape(-1, 4), merge_texts
