"""Write Qwen2.5-shaped GGUF test models with the real Qwen2.5 tokenizer.

The tokenizer comes from a real Qwen2 vocabulary GGUF (the test fixture); ids 151646–151664
become Qwen2.5's added tokens. Tensors carry Qwen2.5's names and shapes with the quant types
llama.cpp's Q4_K_M picks (Q4_K / Q6_K, falling back to Q5_0 / Q8_0 where a row is not a
multiple of 256; norms and biases F32), filled with seeded bytes whose float16 block scales are
then set to finite values sized so that a matrix's values have a standard deviation of about
``1/sqrt(row length)``: the model's forward pass stays finite and its greedy tokens vary, so
it can be compared with llama.cpp (docs/forward.md). Data is streamed to disk,
so the 0.5B (~398 MB) and 1.5B presets do not need the model in memory.

    python -m q25deploy.model.synthetic --preset 0.5b --vocab tests/data/ggml-vocab-qwen2.gguf out.gguf
"""

from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter
from gguf import GGMLQuantizationType as Q

from .gguf import GGUFFile

QWEN25_ADDED = [
    (151643, "<|endoftext|>", 3),
    (151644, "<|im_start|>", 3),
    (151645, "<|im_end|>", 3),
    (151646, "<|object_ref_start|>", 3),
    (151647, "<|object_ref_end|>", 3),
    (151648, "<|box_start|>", 3),
    (151649, "<|box_end|>", 3),
    (151650, "<|quad_start|>", 3),
    (151651, "<|quad_end|>", 3),
    (151652, "<|vision_start|>", 3),
    (151653, "<|vision_end|>", 3),
    (151654, "<|vision_pad|>", 3),
    (151655, "<|image_pad|>", 3),
    (151656, "<|video_pad|>", 3),
    (151657, "<tool_call>", 4),
    (151658, "</tool_call>", 4),
    (151659, "<|fim_prefix|>", 4),
    (151660, "<|fim_middle|>", 4),
    (151661, "<|fim_suffix|>", 4),
    (151662, "<|fim_pad|>", 4),
    (151663, "<|repo_name|>", 4),
    (151664, "<|file_sep|>", 4),
]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class Shape:
    layers: int
    n_embd: int
    n_ff: int
    heads: int
    kv_heads: int
    tied: bool


PRESETS: dict[str, Shape] = {
    # small presets for tests: real vocabulary, few narrow layers
    "tiny": Shape(2, 32, 256, 4, 2, True),
    "tiny-untied": Shape(3, 256, 512, 4, 2, False),
    # Qwen2.5 shapes (fixture README)
    "0.5b": Shape(24, 896, 4864, 14, 2, True),
    "1.5b": Shape(28, 1536, 8960, 12, 2, True),
    "3b": Shape(36, 2048, 11008, 16, 2, True),
    "7b": Shape(28, 3584, 18944, 28, 4, False),
}


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fallback(qtype: Q, row: int) -> Q:
    if row % 256 == 0:
        return qtype
    return {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}.get(qtype, qtype)


def tensor_plan(shape: Shape) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, GGUF shape (ne0 first), type) for every tensor, in llama.cpp's order."""
    e, ff = shape.n_embd, shape.n_ff
    kv = e // shape.heads * shape.kv_heads
    vocab = 151936
    plan: list[tuple[str, tuple[int, ...], Q]] = []
    embd_q = Q.Q6_K if shape.tied else Q.Q4_K  # a tied embedding is also the output matrix
    plan.append(("token_embd.weight", (e, vocab), _fallback(embd_q, e)))
    for i in range(shape.layers):
        more = _more_bits(i, shape.layers)
        p = f"blk.{i}."
        plan += [
            (p + "attn_norm.weight", (e,), Q.F32),
            (p + "attn_q.weight", (e, e), _fallback(Q.Q4_K, e)),
            (p + "attn_q.bias", (e,), Q.F32),
            (p + "attn_k.weight", (e, kv), _fallback(Q.Q4_K, e)),
            (p + "attn_k.bias", (kv,), Q.F32),
            (p + "attn_v.weight", (e, kv), _fallback(Q.Q6_K if more else Q.Q4_K, e)),
            (p + "attn_v.bias", (kv,), Q.F32),
            (p + "attn_output.weight", (e, e), _fallback(Q.Q4_K, e)),
            (p + "ffn_norm.weight", (e,), Q.F32),
            (p + "ffn_gate.weight", (e, ff), _fallback(Q.Q4_K, e)),
            (p + "ffn_up.weight", (e, ff), _fallback(Q.Q4_K, e)),
            (p + "ffn_down.weight", (ff, e), _fallback(Q.Q6_K if more else Q.Q4_K, ff)),
        ]
    plan.append(("output_norm.weight", (e,), Q.F32))
    if not shape.tied:
        plan.append(("output.weight", (e, vocab), _fallback(Q.Q6_K, e)))
    return plan


def nbytes(gshape: tuple[int, ...], qtype: Q) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = int(np.prod(gshape))
    return n // block * size


# per type: byte offset of the block's scale d, of its minimum's scale dmin (or None), and the
# standard deviation of a value when d = 1 and the other bytes are uniformly random
# (Q8_0: int8; Q5_0: q - 16; Q6_K: int8 scale * (q - 32); Q4_K: sc*q - 7.5*m with dmin = 7.5 d,
# which makes the mean zero)
_SCALES = {Q.Q8_0: (0, None, 73.9), Q.Q5_0: (0, None, 9.23), Q.Q6_K: (208, None, 1365.0), Q.Q4_K: (0, 2, 258.0)}


def finite_scales(data: np.ndarray, qtype: Q, row: int, rng: np.random.Generator) -> np.ndarray:
    """``data`` (a writable uint8 array of whole blocks) with every block's float16 scales
    replaced by finite ones: ``d`` uniform in [0.5, 1.5] / (spread * sqrt(row))."""
    at, at_min, spread = _SCALES[qtype]
    blocks = data.reshape(-1, GGML_QUANT_SIZES[qtype][1])
    d = rng.uniform(0.5, 1.5, len(blocks)) / (spread * np.sqrt(row))
    blocks[:, at : at + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    if at_min is not None:
        blocks[:, at_min : at_min + 2] = (7.5 * d).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return data


def qwen25_tokenizer(vocab_gguf: str) -> tuple[list[bytes], list[int], list[bytes]]:
    """Tokens, types and merges of Qwen2.5, from a Qwen2 vocabulary GGUF."""
    with GGUFFile(vocab_gguf) as f:
        tokens = f.metadata["tokenizer.ggml.tokens"].to_list()
        types = f.metadata["tokenizer.ggml.token_type"].tolist()
        merges = f.metadata["tokenizer.ggml.merges"].to_list()
    for tid, text, ttype in QWEN25_ADDED:
        tokens[tid] = text.encode()
        types[tid] = ttype
    return tokens, types, merges


def write_model(
    path: str | os.PathLike[str],
    preset: str,
    vocab_gguf: str,
    *,
    seed: int = 0,
    name: str | None = None,
    license: str | None = "apache-2.0",
    tokenizer: tuple[list[bytes], list[int], list[bytes]] | None = None,
) -> None:
    shape = PRESETS[preset]
    tokens, types, merges = tokenizer or qwen25_tokenizer(vocab_gguf)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    w = GGUFWriter(os.fspath(path), "qwen2")
    w.add_name(name or f"Qwen2.5 {preset} synthetic (q25deploy test model)")
    if license:
        w.add_license(license)
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    w.add_block_count(shape.layers)
    w.add_context_length(32768)
    w.add_embedding_length(shape.n_embd)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_bos_token_id(151643)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    plan = tensor_plan(shape)
    for tname, gshape, qtype in plan:
        nb = nbytes(gshape, qtype)
        if qtype == Q.F32:
            w.add_tensor_info(tname, tuple(reversed(gshape)), np.dtype(np.float32), nb)
        else:
            byte_shape = (*reversed(gshape[1:]), nb // int(np.prod(gshape[1:])))
            w.add_tensor_info(tname, byte_shape, np.dtype(np.uint8), nb, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for tname, gshape, qtype in plan:
        nb = nbytes(gshape, qtype)
        digest = hashlib.sha256(f"{seed}:{tname}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        if qtype == Q.F32:
            data = rng.standard_normal(nb // 4, dtype=np.float32)
        else:
            data = finite_scales(np.frombuffer(rng.bytes(nb), dtype=np.uint8).copy(), qtype, gshape[0], rng)
        w.write_tensor_data(data)
    w.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m q25deploy.model.synthetic", description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--vocab", required=True, help="a Qwen2 vocabulary GGUF (tests/data/ggml-vocab-qwen2.gguf)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    write_model(a.out, a.preset, a.vocab, seed=a.seed)


if __name__ == "__main__":
    main()
