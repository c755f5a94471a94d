"""The forward pass's hyperparameters: read from the metadata, and a model it cannot run
refused in one line (a hostile file never reaches numpy with a wrong shape)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf_craft import FLOAT32, gguf, kv_str, kv_str_array, kv_u32, s, tensor_info

from q25deploy.errors import GGUFError
from q25deploy.model.gguf import GGUFFile
from q25deploy.model.hparams import hparams, runnable, tensor_shapes


def kv_f32(key: str, v: float) -> bytes:
    return s(key) + struct.pack("<If", FLOAT32, v)


def model(tmp_path, kvs: list[bytes], tensors: list[bytes] = (), data: bytes = b"") -> GGUFFile:
    p = tmp_path / "m.gguf"
    p.write_bytes(gguf(kvs, list(tensors), data))
    return GGUFFile(p)


BASE = [
    kv_str("general.architecture", "qwen2"),
    kv_u32("qwen2.block_count", 1),
    kv_u32("qwen2.embedding_length", 8),
    kv_u32("qwen2.feed_forward_length", 16),
    kv_u32("qwen2.attention.head_count", 2),
    kv_u32("qwen2.attention.head_count_kv", 1),
    kv_u32("qwen2.context_length", 64),
    kv_f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6),
    kv_str_array("tokenizer.ggml.tokens", [b"a", b"b", b"c"]),
]


def test_hyperparameters_come_from_the_metadata(tmp_path, qwen25_tiny):
    with GGUFFile(qwen25_tiny) as f:
        hp = runnable(f)
    assert (hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv, hp.head_dim) == (2, 32, 256, 4, 2, 8)
    assert (hp.rope_freq_base, hp.rms_eps, hp.tied_output, hp.n_vocab) == (1e6, float(np.float32(1e-6)), True, 151936)
    with model(tmp_path, BASE) as f:
        hp = hparams(f)
    assert hp.rope_freq_base == 10000.0 and hp.n_rot == 4  # llama.cpp's defaults
    assert len(tensor_shapes(hp)) == 2 + 12 and tensor_shapes(hp)["blk.0.attn_k.weight"] == (8, 4)


@pytest.mark.parametrize(
    "change,message",
    [
        ([kv_str("general.architecture", "llama")], "architecture"),
        ([kv_u32("qwen2.attention.head_count", 3)], "does not divide"),
        ([kv_u32("qwen2.attention.head_count_kv", 0)], "head_count_kv"),
        ([kv_f32("qwen2.attention.layer_norm_rms_epsilon", float("nan"))], "layer_norm_rms_epsilon"),
        ([kv_str("qwen2.rope.scaling.type", "yarn")], "rope scaling"),
        ([kv_u32("qwen2.rope.dimension_count", 5)], "rope dimension"),
    ],
)
def test_metadata_the_forward_pass_cannot_run_is_refused_in_one_line(tmp_path, change, message):
    # the changed keys replace their BASE entries (a key is its length-prefixed name)
    replaced = [kv for kv in BASE if not any(kv.startswith(c[: 8 + struct.unpack("<Q", c[:8])[0]]) for c in change)]
    with model(tmp_path, replaced + change) as f, pytest.raises(GGUFError, match=message) as e:
        hparams(f)
    assert "\n" not in str(e.value)


def test_a_tensor_of_the_wrong_shape_is_refused_before_any_arithmetic(tmp_path):
    tensors = [tensor_info("token_embd.weight", (8, 3), 0, 0), tensor_info("output_norm.weight", (9,), 0, 96)]
    with (
        model(tmp_path, BASE, tensors, bytes(160)) as f,
        pytest.raises(GGUFError, match="output_norm.weight has shape"),
    ):
        runnable(f)
    with model(tmp_path, BASE, tensors[:1], bytes(96)) as f, pytest.raises(GGUFError, match="needs tensor output_norm"):
        runnable(f)
