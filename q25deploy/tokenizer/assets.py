"""The tokenizer asset set: text assets, PS bundle and the Q25TOKRT runtime image.

:func:`tokenizer_assets` is pure (a :class:`~q25deploy.tokenizer.vocab.Vocab` in, named byte strings
out); :func:`write_assets` puts them into an :class:`~q25deploy.packer.outputs.OutputDir`.
Layouts are specified in docs/tokenizer-assets.md and docs/runtime-image.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from json.encoder import encode_basestring as _json_str
from typing import Protocol

import numpy as np

from ..common import json_bytes
from ..model.token_types import TYPE_NAMES
from .image.format import (
    DEFAULT_ALIGNMENT,
    MAGIC,
    VERSION_MAJOR,
    VERSION_MINOR,
    build_image,
    ps_bundle,
)
from .vocab import Vocab


class AssetSink(Protocol):
    """Where assets are written (an :class:`~q25deploy.packer.outputs.OutputDir`)."""

    def write(self, rel: str, data: bytes, kind: str) -> None: ...


IMAGE_NAME = "tokenizer.q25tokrt"
IMAGE_MANIFEST = "tokenizer_runtime_image_manifest.json"


@dataclass(frozen=True)
class Asset:
    path: str
    kind: str
    data: bytes


def tokens_jsonl(vocab: Vocab) -> bytes:
    """One JSON object per token, in id order (formatted directly: ~150k lines)."""
    effective = vocab.types.tolist()
    names = {t: TYPE_NAMES.get(t, str(t)) for t in set(effective) | set(vocab.gguf_types.tolist())}
    lines = []
    for i, (text, raw, t) in enumerate(zip(vocab.texts, vocab.raw, vocab.gguf_types.tolist())):
        extra = f',"runtime_type":"{names[effective[i]]}"' if effective[i] != t else ""
        lines.append(
            f'{{"id":{i},"type":"{names[t]}","text":{_json_str(text.decode("utf-8", "replace"))},'
            f'"bytes":"{raw.hex()}"{extra}}}'
        )
    return ("\n".join(lines) + "\n").encode("utf-8")


def tokenizer_assets(
    vocab: Vocab,
    *,
    source_sha256: str,
    model_name: str = "",
    alignment: int = DEFAULT_ALIGNMENT,
) -> tuple[list[Asset], dict]:
    """All tokenizer files and the runtime image's manifest (also returned as a dict)."""
    bundle = ps_bundle(vocab)
    image = build_image(
        vocab, source_sha256=bytes.fromhex(source_sha256), model_name=model_name, alignment=alignment, bundle=bundle
    )
    image_manifest = {
        "format": MAGIC.decode(),
        "version": f"{VERSION_MAJOR}.{VERSION_MINOR}",
        "path": IMAGE_NAME,
        "size": len(image.data),
        "sha256": hashlib.sha256(image.data).hexdigest(),
        "alignment": alignment,
        "vocab_fingerprint": image.fingerprint.hex(),
        "source_sha256": source_sha256,
        "model_name": model_name,
        "pre_tokenizer": vocab.pre,
        "vocab_size": vocab.n_tokens,
        "merge_count": len(vocab.merges),
        "bos": vocab.bos,
        "eos": vocab.eos,
        "pad": vocab.pad,
        "add_bos": vocab.add_bos,
        "sections": image.sections,
    }
    assets = [
        Asset("tokens.jsonl", "tokens-jsonl", tokens_jsonl(vocab)),
        Asset("merges.txt", "merges-txt", b"".join(m + b"\n" for m in vocab.merge_texts)),
        Asset("token_types.bin", "token-types", vocab.gguf_types.astype(np.uint8).tobytes()),
        Asset("token_index.bin", "ps-token-index", bundle["token_index.bin"]),
        Asset("token_bytes.bin", "ps-token-bytes", bundle["token_bytes.bin"]),
        Asset("merge_table_u32.bin", "ps-merge-table", bundle["merge_table_u32.bin"]),
        Asset(IMAGE_NAME, "tokenizer-runtime-image", image.data),
        Asset(IMAGE_MANIFEST, "tokenizer-runtime-image-manifest", json_bytes(image_manifest)),
    ]
    if vocab.chat_template is not None:
        assets.append(Asset("chat_template.txt", "chat-template", vocab.chat_template.encode("utf-8")))
    return assets, image_manifest


def write_assets(out: AssetSink, assets: list[Asset], prefix: str = "") -> None:
    for a in assets:
        out.write(prefix + a.path, a.data, a.kind)
