"""The hyperparameters of a ``qwen2`` GGUF: what the forward pass needs of the metadata, checked
once, and ``model_hparams.txt``, the same facts in a ``key=value`` form the C runtime parses
(docs/forward.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GGUFError
from .gguf import GGUFFile

HPARAMS_FORMAT = "q25deploy-hparams/1"
ARCH = "qwen2"
MAX_DIM = 1 << 20  # sanity bound on any width or count (Qwen2.5-72B's widest is 29568)


@dataclass(frozen=True)
class HParams:
    n_vocab: int
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_rot: int
    rope_freq_base: float  # the float32 the GGUF holds
    rms_eps: float  # the float32 the GGUF holds
    tied_output: bool
    n_ctx_train: int
    bos_token_id: int
    eos_token_id: int
    add_bos: bool

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_embd_kv(self) -> int:
        return self.head_dim * self.n_head_kv


def _int(md: dict[str, Any], key: str, path: str, default: int | None = None, lo: int = 1) -> int:
    v = md.get(key, default)
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not lo <= int(v) <= MAX_DIM * 1024:
        raise GGUFError(f"{path}: metadata {key} is missing or not a sensible integer ({v!r:.40})")
    return int(v)


def _float32(md: dict[str, Any], key: str, path: str, default: float | None = None) -> float:
    v = md.get(key, default)
    if not isinstance(v, (int, float, np.floating)) or isinstance(v, bool) or not np.isfinite(v) or v <= 0:
        raise GGUFError(f"{path}: metadata {key} is missing or not a positive number ({v!r:.40})")
    return float(np.float32(v))


def hparams(f: GGUFFile) -> HParams:
    """The forward pass's hyperparameters; a one-line :class:`GGUFError` for a model it cannot run."""
    md, path = f.metadata, f.path
    arch = md.get("general.architecture")
    if arch != ARCH:
        raise GGUFError(f"{path}: the forward pass knows architecture {ARCH!r}, not {str(arch)!r:.40}")
    scaling = md.get(f"{ARCH}.rope.scaling.type", "none")
    if scaling not in ("none", None) or md.get(f"{ARCH}.rope.scaling.factor", 1.0) not in (0.0, 1.0):
        raise GGUFError(f"{path}: rope scaling ({str(scaling):.20}) is not supported by the forward pass")
    n_embd = _int(md, f"{ARCH}.embedding_length", path)
    n_head = _int(md, f"{ARCH}.attention.head_count", path)
    n_head_kv = _int(md, f"{ARCH}.attention.head_count_kv", path, n_head)
    if n_embd > MAX_DIM or n_embd % n_head or n_head % n_head_kv:
        raise GGUFError(f"{path}: {n_embd} wide with {n_head} heads and {n_head_kv} KV heads does not divide")
    n_rot = _int(md, f"{ARCH}.rope.dimension_count", path, n_embd // n_head)
    if n_rot > n_embd // n_head or n_rot % 2:
        raise GGUFError(f"{path}: rope dimension {n_rot} must be even and at most the head size")
    tokens = md.get("tokenizer.ggml.tokens")
    names = {t.name for t in f.tensors}
    hp = HParams(
        n_vocab=len(tokens) if tokens is not None else f.tensor("token_embd.weight").shape[1],
        n_layer=_int(md, f"{ARCH}.block_count", path),
        n_embd=n_embd,
        n_ff=_int(md, f"{ARCH}.feed_forward_length", path),
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_rot=n_rot,
        rope_freq_base=_float32(md, f"{ARCH}.rope.freq_base", path, 10000.0),
        rms_eps=_float32(md, f"{ARCH}.attention.layer_norm_rms_epsilon", path),
        tied_output="output.weight" not in names,
        n_ctx_train=_int(md, f"{ARCH}.context_length", path),
        bos_token_id=_int(md, "tokenizer.ggml.bos_token_id", path, 0, lo=0),
        eos_token_id=_int(md, "tokenizer.ggml.eos_token_id", path, 0, lo=0),
        add_bos=bool(md.get("tokenizer.ggml.add_bos_token", False)),
    )
    if hp.n_layer > MAX_DIM or hp.n_ff > MAX_DIM * 64:
        raise GGUFError(f"{path}: {hp.n_layer} layers of width {hp.n_ff} is not a model this tool runs")
    return hp


def _float_text(v: float) -> str:
    """The shortest decimal that ``strtof`` turns back into this float32."""
    x = np.float32(v)
    if 1e-3 <= abs(x) < 1e9:
        return np.format_float_positional(x, unique=True, trim="0")
    return np.format_float_scientific(x, unique=True, trim="0")


def hparams_text(hp: HParams) -> str:
    """``model_hparams.txt`` (docs/forward.md): ASCII ``key=value`` lines for the C runtime."""
    rows = [
        ("format", HPARAMS_FORMAT),
        ("arch", ARCH),
        ("n_vocab", hp.n_vocab),
        ("n_layer", hp.n_layer),
        ("n_embd", hp.n_embd),
        ("n_ff", hp.n_ff),
        ("n_head", hp.n_head),
        ("n_head_kv", hp.n_head_kv),
        ("head_dim", hp.head_dim),
        ("n_rot", hp.n_rot),
        ("rope_freq_base", _float_text(hp.rope_freq_base)),
        ("rms_eps", _float_text(hp.rms_eps)),
        ("tied_output", int(hp.tied_output)),
        ("n_ctx_train", hp.n_ctx_train),
        ("bos_token_id", hp.bos_token_id),
        ("eos_token_id", hp.eos_token_id),
        ("add_bos", int(hp.add_bos)),
    ]
    return "# q25deploy model hyperparameters (docs/forward.md)\n" + "".join(f"{k}={v}\n" for k, v in rows)


# the ggml types gguf-py dequantises and q25_dequantize knows
RUNNABLE_TYPES = frozenset(
    {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
)


def tensor_shapes(hp: HParams) -> dict[str, tuple[int, ...]]:
    """Every tensor the forward pass reads, with its GGUF shape (ne0 first)."""
    e, kv, ff = hp.n_embd, hp.n_embd_kv, hp.n_ff
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (e, hp.n_vocab), "output_norm.weight": (e,)}
    if not hp.tied_output:
        shapes["output.weight"] = (e, hp.n_vocab)
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        shapes |= {
            p + "attn_norm.weight": (e,),
            p + "attn_q.weight": (e, e),
            p + "attn_q.bias": (e,),
            p + "attn_k.weight": (e, kv),
            p + "attn_k.bias": (kv,),
            p + "attn_v.weight": (e, kv),
            p + "attn_v.bias": (kv,),
            p + "attn_output.weight": (e, e),
            p + "ffn_norm.weight": (e,),
            p + "ffn_gate.weight": (e, ff),
            p + "ffn_up.weight": (e, ff),
            p + "ffn_down.weight": (ff, e),
        }
    return shapes


def check_tensors(f: GGUFFile, hp: HParams) -> None:
    """Refuse (one line) a model whose tensors the forward pass cannot read as the graph says."""
    have = {t.name: t for t in f.tensors}
    for name, shape in tensor_shapes(hp).items():
        t = have.get(name)
        if t is None:
            raise GGUFError(f"{f.path}: the forward pass needs tensor {name}, which the model lacks")
        if tuple(t.shape) != shape:
            raise GGUFError(f"{f.path}: tensor {name} has shape {list(t.shape)}, the forward pass needs {list(shape)}")
        if t.type_name not in RUNNABLE_TYPES:
            raise GGUFError(f"{f.path}: tensor {name} is {t.type_name}, which the forward pass does not dequantise")


def runnable(f: GGUFFile) -> HParams:
    """The hyperparameters of a model the forward pass can run; GGUFError (one line) otherwise."""
    hp = hparams(f)
    check_tensors(f, hp)
    return hp
