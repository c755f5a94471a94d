"""``export fixtures --forward``: every activation of the host reference, re-computed here by an
independent reading of the model (gguf-py dequantises each tensor whole; the layers below are
written from docs/forward.md, not from q25deploy.model.forward) is bit-identical."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from q25deploy.cli import main
from q25deploy.model.gguf import GGUFFile

PROMPT = "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n"
f32 = np.float32


class Model:
    """The GGUF read again: whole tensors through gguf-py, hyperparameters from the metadata."""

    def __init__(self, path: Path) -> None:
        self.f = GGUFFile(path)
        md = self.f.metadata
        self.layers = md["qwen2.block_count"]
        self.heads = md["qwen2.attention.head_count"]
        self.kv_heads = md["qwen2.attention.head_count_kv"]
        self.dim = md["qwen2.embedding_length"] // self.heads
        self.eps = f32(md["qwen2.attention.layer_norm_rms_epsilon"])
        self.base = float(f32(md["qwen2.rope.freq_base"]))

    def kind(self, name: str) -> str:
        return GGMLQuantizationType(self.f.tensor(name).ggml_type).name

    def mul(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x`` times the matrix, ``x`` first rounded as llama.cpp rounds a quantised product's
        activations (docs/forward.md, "Activations"), one block at a time."""
        kind, y = self.kind(name), np.array(x, f32)
        per = 32 if kind in ("Q5_0", "Q8_0") else 256 if kind in ("Q4_K", "Q6_K") else 0
        for row in y if per else ():
            for b in range(0, len(row), per):
                v = row[b : b + per]
                if per == 32:
                    d = np.abs(v).max() / f32(127)
                    q = np.round(v * (f32(1) / d)) if d else np.zeros_like(v)
                    v[:] = q * f32(np.float16(d))
                else:
                    big = v[np.argmax(np.abs(v))]
                    scale = f32(-127) / big if big else f32(0)
                    v[:] = np.minimum(127, np.round(v * scale)) * (f32(1) / scale if scale else f32(0))
        return y @ self[name].T

    def __getitem__(self, name: str) -> np.ndarray:
        t = self.f.tensor(name)
        v = dequantize(np.frombuffer(self.f.read(t, 0, t.nbytes), np.uint8), GGMLQuantizationType(t.ggml_type))
        return np.asarray(v, f32).reshape(-1, t.shape[0]) if len(t.shape) == 2 else np.asarray(v, f32)


def norm(x, g, eps):
    wide = x.astype(np.float64)
    ms = (np.sum(wide * wide, axis=-1, keepdims=True) / x.shape[-1]).astype(f32)
    return (x * (f32(1.0) / np.sqrt(ms + eps))) * g


def rotate(x, pos, dim, base):
    half = dim // 2
    ang = pos.astype(np.float64)[:, None] * np.power(base, -2.0 * np.arange(half, dtype=np.float64) / dim)
    c, s = np.cos(ang).astype(f32)[:, None, :], np.sin(ang).astype(f32)[:, None, :]
    y = x.copy()
    y[..., :half] = x[..., :half] * c - x[..., half:dim] * s
    y[..., half:dim] = x[..., :half] * s + x[..., half:dim] * c
    return y


def run(m: Model, ids: list[int]) -> dict[tuple, np.ndarray]:
    """Every activation, by (layer or None, name)."""
    t = len(ids)
    pos = np.arange(t)
    acts = {}
    x = m["token_embd.weight"][ids]
    acts[None, "embd"] = x
    mask = pos[None, :] <= pos[:, None]
    for L in range(m.layers):
        w = lambda n, L=L: m[f"blk.{L}.{n}"]  # noqa: E731
        mul = lambda x, n, L=L: m.mul(x, f"blk.{L}.{n}")  # noqa: E731
        acts[L, "input"] = x
        h = norm(x, w("attn_norm.weight"), m.eps)
        q = mul(h, "attn_q.weight") + w("attn_q.bias")
        k = mul(h, "attn_k.weight") + w("attn_k.bias")
        v = mul(h, "attn_v.weight") + w("attn_v.bias")
        qr = rotate(q.reshape(t, m.heads, m.dim), pos, m.dim, m.base)
        kr = rotate(k.reshape(t, m.kv_heads, m.dim), pos, m.dim, m.base)
        vr = v.reshape(t, m.kv_heads, m.dim)
        heads = []
        for hd in range(m.heads):
            g = hd // (m.heads // m.kv_heads)
            kk, vv = np.ascontiguousarray(kr[:, g]), np.ascontiguousarray(vr[:, g])
            sc = np.where(mask, np.ascontiguousarray(qr[:, hd]) @ kk.T * f32(1.0 / np.sqrt(m.dim)), f32(-np.inf))
            e = np.exp(sc - sc.max(axis=-1, keepdims=True))
            p = e * (1.0 / np.sum(e.astype(np.float64), axis=-1, keepdims=True)).astype(f32)
            heads.append(p @ vv)
        a = np.stack(heads, axis=1).reshape(t, -1)
        x2 = x + mul(a, "attn_output.weight")
        h2 = norm(x2, w("ffn_norm.weight"), m.eps)
        gate = mul(h2, "ffn_gate.weight")
        hid = gate / (f32(1.0) + np.exp(-gate)) * mul(h2, "ffn_up.weight")
        x = x2 + mul(hid, "ffn_down.weight")
        acts.update(
            {
                (L, "attn_norm"): h,
                (L, "q"): q,
                (L, "k"): k,
                (L, "v"): v,
                (L, "q_rope"): qr.reshape(t, -1),
                (L, "k_rope"): kr.reshape(t, -1),
                (L, "attn"): a,
                (L, "attn_residual"): x2,
                (L, "ffn_norm"): h2,
                (L, "ffn_hidden"): hid,
                (L, "output"): x,
            }
        )
    out = norm(x, m["output_norm.weight"], m.eps)
    acts[None, "output_norm"] = out
    head = "output.weight" if "output.weight" in {t.name for t in m.f.tensors} else "token_embd.weight"
    acts[None, "logits"] = m.mul(out[-1:], head)
    return acts


@pytest.fixture(scope="module")
def exported(tmp_path_factory, qwen25_tiny) -> Path:
    out = tmp_path_factory.mktemp("fx") / "fx"
    assert main(["export", "fixtures", str(qwen25_tiny), "--out", str(out), "--forward", PROMPT]) == 0
    return out


def test_every_activation_is_bit_identical_to_an_independent_reading(exported, qwen25_tiny, qwen25_codec):
    index = json.loads((exported / "fixtures.json").read_text())["forward"]
    assert index["ids"] == qwen25_codec.encode(PROMPT.encode(), True)
    data = (exported / index["file"]).read_bytes()
    m = Model(qwen25_tiny)
    want = run(m, index["ids"])
    got = {(e["layer"], e["name"]): e for e in index["activations"]}
    assert set(got) == set(want)
    for key, a in want.items():
        e = got[key]
        assert e["shape"] == list(a.shape), key
        n = int(np.prod(a.shape)) * 4
        assert data[e["offset"] : e["offset"] + n] == a.astype("<f4").tobytes(), key
    assert np.isfinite(want[None, "logits"]).all()
    assert len(data) == sum(int(np.prod(a.shape)) * 4 for a in want.values())


def test_a_second_export_gives_the_same_bytes(exported, tmp_path, qwen25_tiny):
    again = tmp_path / "again"
    assert main(["export", "fixtures", str(qwen25_tiny), "--out", str(again), "--forward", PROMPT]) == 0
    for name in ("forward.f32", "fixtures.json"):
        assert (again / name).read_bytes() == (exported / name).read_bytes()


def test_a_prompt_too_long_is_refused_in_one_line(tmp_path, qwen25_tiny, capsys):
    assert main(["export", "fixtures", str(qwen25_tiny), "--out", str(tmp_path / "x"), "--forward", "a " * 600]) != 0
    err = capsys.readouterr().err
    assert "--forward" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
