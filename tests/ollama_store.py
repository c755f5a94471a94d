"""Build an Ollama model store on disk (manifests + blobs) the way `ollama pull` lays it out."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MEDIA = "application/vnd.ollama.image."


def _blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def add_model(
    root: Path,
    ref: str,
    gguf: Path,
    *,
    license: str | None = "Apache License 2.0 (test)",
    template: str = "{{ .Prompt }}",
    params: str = '{"stop": ["<|im_end|>"]}',
) -> Path:
    """Add ``ref`` (name:tag or host/ns/name:tag) pointing at a copy of ``gguf``; returns the blob path."""
    name, _, tag = ref.partition(":")
    parts = name.split("/")
    host, ns = (
        ("registry.ollama.ai", "library")
        if len(parts) == 1
        else (("registry.ollama.ai", parts[0]) if len(parts) == 2 else (parts[0], parts[1]))
    )
    model = parts[-1]
    data = Path(gguf).read_bytes()
    layers = [{"mediaType": MEDIA + "model", **_blob(root, data)}]
    layers.append({"mediaType": MEDIA + "template", **_blob(root, template.encode())})
    if license is not None:
        layers.append({"mediaType": MEDIA + "license", **_blob(root, license.encode())})
    layers.append({"mediaType": MEDIA + "params", **_blob(root, params.encode())})
    config = _blob(root, b'{"model_format":"gguf","model_family":"qwen2"}')
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
        "layers": layers,
    }
    mdir = root / "manifests" / host / ns / model
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / (tag or "latest")).write_text(json.dumps(manifest))
    return root / "blobs" / f"sha256-{hashlib.sha256(data).hexdigest()}"


def blob_for(root: Path, data_path: Path) -> Path:
    return root / "blobs" / f"sha256-{hashlib.sha256(Path(data_path).read_bytes()).hexdigest()}"


__all__ = ["add_model", "blob_for", "os"]
