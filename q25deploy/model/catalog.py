"""``q25deploy inspect``: the catalog of a model — metadata, tensor directory, tokenizer
summary and quant mix — built from the GGUF's header alone (tensor data is never read)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from gguf import GGUFValueType

from ..common import format_size, printable
from .gguf import GGUFFile, StringArray
from .source import ModelSource
from .token_types import CONTROL, TYPE_NAMES, UNKNOWN, USER_DEFINED

_SHOWN_ARRAY = 16


def _meta_value(value: Any, vtype: Any) -> Any:
    if isinstance(vtype, tuple):
        etype = GGUFValueType(vtype[1]).name
        n = len(value)
        entry: dict[str, Any] = {"type": "array", "element_type": etype, "length": n}
        if n <= _SHOWN_ARRAY:
            if isinstance(value, StringArray):
                entry["values"] = [v.decode("utf-8", "replace") for v in value]
            elif isinstance(value, np.ndarray):
                entry["values"] = value.tolist()
        return entry
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def tokenizer_summary(f: GGUFFile) -> dict | None:
    md = f.metadata
    tokens = md.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, StringArray):
        return None
    types = md.get("tokenizer.ggml.token_type")
    merges = md.get("tokenizer.ggml.merges")
    summary: dict[str, Any] = {
        "model": md.get("tokenizer.ggml.model"),
        "pre": md.get("tokenizer.ggml.pre"),
        "tokens": len(tokens),
        "merges": len(merges) if isinstance(merges, StringArray) else 0,
        "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
        "padding_token_id": md.get("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(md.get("tokenizer.ggml.add_bos_token", False)),
        "chat_template": isinstance(md.get("tokenizer.chat_template"), str),
    }
    special = []
    if isinstance(types, np.ndarray) and len(types) == len(tokens):
        counts = Counter(types.tolist())
        summary["token_types"] = {TYPE_NAMES.get(k, str(k)): v for k, v in sorted(counts.items())}
        for i in np.nonzero(np.isin(types, (CONTROL, USER_DEFINED, UNKNOWN)))[0].tolist():
            special.append({"id": i, "text": tokens[i].decode("utf-8", "replace"), "type": TYPE_NAMES[int(types[i])]})
    summary["special_tokens"] = special
    return summary


def build_catalog(src: ModelSource, f: GGUFFile) -> dict:
    mix: dict[str, dict[str, int]] = {}
    for t in f.tensors:
        m = mix.setdefault(t.type_name, {"tensors": 0, "bytes": 0, "elements": 0})
        m["tensors"] += 1
        m["bytes"] += t.nbytes
        m["elements"] += t.n_elements
    total = sum(t.nbytes for t in f.tensors)
    model: dict[str, Any] = {
        "reference": src.reference,
        "source": src.kind,
        "path": str(src.path),
        "file_size": f.size,
        "gguf_version": f.version,
        "alignment": f.alignment,
        "data_offset": f.data_start,
        "architecture": f.metadata.get("general.architecture"),
        "name": f.metadata.get("general.name"),
    }
    if src.sha256:
        model["sha256"] = src.sha256
    if src.ollama:
        model["ollama"] = src.ollama
    return {
        "model": model,
        "metadata": {k: _meta_value(v, f.value_types[k]) for k, v in f.metadata.items()},
        "tensors": [
            {"name": t.name, "type": t.type_name, "shape": list(t.shape), "offset": t.offset, "bytes": t.nbytes}
            for t in f.tensors
        ],
        "tokenizer": tokenizer_summary(f),
        "quant_mix": {k: mix[k] for k in sorted(mix, key=lambda k: -mix[k]["bytes"])},
        "tensor_bytes": total,
    }


def render_catalog(cat: dict) -> str:
    """``inspect``'s text for people; every string from the model passes :func:`printable`."""
    return "\n".join(_render_lines(cat))


def _render_lines(cat: dict) -> list[str]:
    m = cat["model"]
    lines = [
        f"model      {m['name'] or '(unnamed)'}  [{m['architecture']}]",
        f"source     {m['source']}: {m['reference']}" + (f" -> {m['path']}" if m["source"] != "file" else ""),
        f"file       {m['file_size']:,} bytes, GGUF v{m['gguf_version']}, alignment {m['alignment']}, "
        f"data at {m['data_offset']:,}",
    ]
    if "sha256" in m:
        lines.append(f"sha256     {m['sha256']}")
    tok = cat["tokenizer"]
    if tok:
        lines.append(
            f"tokenizer  {tok['model']}/{tok['pre']}: {tok['tokens']:,} tokens, {tok['merges']:,} merges, "
            f"bos {tok['bos_token_id']} eos {tok['eos_token_id']} pad {tok['padding_token_id']}, "
            f"chat template {'yes' if tok['chat_template'] else 'no'}"
        )
        if tok.get("token_types"):
            lines.append("           types " + ", ".join(f"{k} {v:,}" for k, v in tok["token_types"].items()))
        named = [s for s in tok["special_tokens"] if not s["text"].startswith("[PAD")]
        if named:
            shown = ", ".join(f"{s['id']} {s['text']}" for s in named[:8])
            more = f" (+{len(named) - 8} more)" if len(named) > 8 else ""
            lines.append(f"           special {shown}{more}")
    else:
        lines.append("tokenizer  none")
    lines.append(f"tensors    {len(cat['tensors'])}, {format_size(cat['tensor_bytes'])}")
    for name, q in cat["quant_mix"].items():
        lines.append(f"  {name:<6} {q['tensors']:>5} tensors  {format_size(q['bytes']):>14}")
    if cat["tensors"]:
        lines.append("largest tensors:")
        for t in sorted(cat["tensors"], key=lambda t: -t["bytes"])[:5]:
            lines.append(
                f"  {t['name']:<28} {t['type']:<6} {'x'.join(map(str, t['shape'])):<14} {format_size(t['bytes']):>12}"
            )
    return [printable(line) for line in lines]
