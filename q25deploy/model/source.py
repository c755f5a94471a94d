"""Resolve ``MODEL`` (a ``.gguf`` path or an Ollama reference) to a verified GGUF file.

Ollama: ``name[:tag]`` or ``host/namespace/name:tag`` is looked up in ``$OLLAMA_MODELS`` or
``~/.ollama/models``: manifest → layer of media type ``application/vnd.ollama.image.model``
→ ``blobs/sha256-<hex>``. The blob's size and sha256 are verified (streaming); a verified
(path, size, mtime) is remembered in a small cache file so a rebuild does not rehash
gigabytes. The template/params/license/system layers are kept for the catalog.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..common import cache_dir as default_cache_root
from ..common import file_sha256 as sha256_of_file
from ..common import is_sha256, json_bytes, write_atomic
from ..errors import ModelSourceError

MODEL_MEDIA = "application/vnd.ollama.image.model"
TEXT_LAYER_MAX = 1 << 20  # template, params, licence, system: text, never megabytes
TEXT_LAYERS = ("template", "system", "params", "license")
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})\Z")
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_HASH_CHUNK = 1 << 22


@dataclass
class ModelSource:
    """A resolved model: the GGUF path and what is known about where it came from."""

    path: Path
    reference: str  # what the user typed
    kind: str  # "file" or "ollama"
    sha256: str | None = None  # known for Ollama blobs (verified), else computed on demand
    size: int = 0
    ollama: dict = field(default_factory=dict)  # manifest name and the text layers

    def refetch(self) -> str:
        """How to fetch this model again (for a file found truncated)."""
        if self.kind == "ollama":
            return f"`ollama pull {self.reference}` or re-download it"
        return "re-download it or copy it again"

    def digest(self) -> str:
        """The file's sha256 (cached across runs by (path, size, mtime))."""
        if self.sha256 is None:
            self.sha256 = file_sha256(self.path)
        return self.sha256


def ollama_root() -> Path:
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env) if env else Path.home() / ".ollama" / "models"


def looks_like_path(ref: str) -> bool:
    return ref.endswith(".gguf") or (os.sep in ref and not _is_ollama_ref(ref)) or os.path.exists(ref)


def _is_ollama_ref(ref: str) -> bool:
    name = ref.split(":", 1)[0]
    parts = name.split("/")
    return 1 <= len(parts) <= 3 and all(_PART.match(p) for p in parts)


def parse_reference(ref: str) -> tuple[str, str, str, str]:
    """``name[:tag]`` / ``ns/name[:tag]`` / ``host/ns/name[:tag]`` → (host, ns, name, tag)."""
    name, _, tag = ref.partition(":")
    tag = tag or "latest"
    parts = name.split("/")
    if not _is_ollama_ref(ref) or not _PART.match(tag):
        raise ModelSourceError(f"{ref!r} is neither a .gguf file nor an Ollama model reference (name[:tag])")
    if len(parts) == 1:
        return DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0], tag
    if len(parts) == 2:
        return DEFAULT_HOST, parts[0], parts[1], tag
    return parts[0], parts[1], parts[2], tag


def list_ollama_models(root: Path) -> list[str]:
    base = root / "manifests"
    found = []
    for p in sorted(base.glob("*/*/*/*")):
        if p.is_file():
            host, ns, name, tag = p.relative_to(base).parts
            short = f"{name}:{tag}" if (host, ns) == (DEFAULT_HOST, DEFAULT_NAMESPACE) else f"{host}/{ns}/{name}:{tag}"
            found.append(short)
    return found


def resolve(ref: str, *, cache_dir: Path | None = None) -> ModelSource:
    """Resolve a model reference; raises :class:`ModelSourceError` with a one-line reason."""
    if looks_like_path(ref):
        p = Path(ref)
        if not p.is_file():
            raise ModelSourceError(f"{ref}: no such model file")
        return ModelSource(path=p, reference=ref, kind="file", size=p.stat().st_size)
    host, ns, name, tag = parse_reference(ref)
    root = ollama_root()
    if not (root / "manifests").is_dir():
        raise ModelSourceError(f"no Ollama model store at {root} (set OLLAMA_MODELS, or pass a .gguf path)")
    mpath = root / "manifests" / host / ns / name / tag
    if not mpath.is_file():
        have = list_ollama_models(root)
        listing = ", ".join(have) if have else "none"
        raise ModelSourceError(f"model {ref!r} is not in the Ollama store at {root} (available: {listing})")
    try:
        manifest = json.loads(mpath.read_text("utf-8"))
        layers = manifest["layers"]
        if not isinstance(layers, list):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise ModelSourceError(f"{mpath}: unreadable Ollama manifest") from None
    model_layer = next((lay for lay in layers if isinstance(lay, dict) and lay.get("mediaType") == MODEL_MEDIA), None)
    if model_layer is None:
        raise ModelSourceError(f"model {ref!r}: manifest has no {MODEL_MEDIA} layer")
    digest, size = _layer_digest(model_layer, ref)
    blob = _blob_path(root, digest)
    if blob is None:
        raise ModelSourceError(f"model {ref!r}: blob sha256-{digest} is missing from {root / 'blobs'}")
    verify_blob(blob, digest, size, cache_dir=cache_dir)
    info: dict = {"manifest": f"{host}/{ns}/{name}:{tag}", "digest": f"sha256:{digest}"}
    for lay in layers:
        media = lay.get("mediaType", "") if isinstance(lay, dict) else ""
        kind = media.rsplit(".", 1)[-1]
        if media.startswith("application/vnd.ollama.image.") and kind in TEXT_LAYERS:
            ld, lsize = _layer_digest(lay, ref)
            lb = _blob_path(root, ld)
            if lb is None:
                raise ModelSourceError(f"model {ref!r}: {kind} blob sha256-{ld} is missing")
            if lsize > TEXT_LAYER_MAX or lb.stat().st_size != lsize:  # checked before anything is read
                raise ModelSourceError(
                    f"model {ref!r}: {kind} blob sha256-{ld} is {lb.stat().st_size:,} bytes "
                    f"(manifest: {lsize:,}; a text layer may have at most {TEXT_LAYER_MAX:,})"
                )
            data = lb.read_bytes()
            if len(data) != lsize or hashlib.sha256(data).hexdigest() != ld:
                raise ModelSourceError(f"model {ref!r}: {kind} blob sha256-{ld} does not match its digest")
            text = data.decode("utf-8", "replace")
            # several license layers are possible; keep them all, in order
            info[kind] = info[kind] + "\n\n" + text if kind in info else text
    return ModelSource(path=blob, reference=ref, kind="ollama", sha256=digest, size=size, ollama=info)


def _layer_digest(layer: dict, ref: str) -> tuple[str, int]:
    m = _DIGEST.match(str(layer.get("digest", "")))
    size = layer.get("size")
    if not m or not isinstance(size, int) or size < 0:
        raise ModelSourceError(f"model {ref!r}: manifest layer has a malformed digest or size")
    return m.group(1), size


def _blob_path(root: Path, digest: str) -> Path | None:
    for name in (f"sha256-{digest}", f"sha256:{digest}"):
        p = root / "blobs" / name
        if p.is_file():
            return p
    return None


# -- verified-digest cache --------------------------------------------------------------
def _cache_file(cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_root()) / "verified.json"


def _cache_key(path: Path) -> tuple[str, str]:
    st = path.stat()
    return str(path.resolve()), f"{st.st_size}:{st.st_mtime_ns}"


def _cache_load(cache_dir: Path | None) -> dict:
    try:
        data = json.loads(_cache_file(cache_dir).read_text("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _cache_store(cache_dir: Path | None, path: Path, digest: str) -> None:
    f = _cache_file(cache_dir)
    data = _cache_load(cache_dir)
    key, stamp = _cache_key(path)
    data[key] = {"stamp": stamp, "sha256": digest}
    try:
        write_atomic(f, json_bytes(data), sync=False)
    except OSError:
        pass  # a cache that cannot be written only costs a rehash next time


def remember_digest(path: Path, digest: str, cache_dir: Path | None = None) -> None:
    """Record a digest computed elsewhere (e.g. during a build's single read of the file)."""
    _cache_store(cache_dir, Path(path), digest)


def cached_digest(path: Path, cache_dir: Path | None = None) -> str | None:
    key, stamp = _cache_key(path)
    entry = _cache_load(cache_dir).get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and is_sha256(entry.get("sha256")):
        return entry["sha256"]
    return None  # a value that is not a sha256 is no entry: it would become a cache path


def file_sha256(path: Path, cache_dir: Path | None = None) -> str:
    hit = cached_digest(path, cache_dir)
    if hit:
        return hit
    digest = sha256_of_file(path)
    _cache_store(cache_dir, path, digest)
    return digest


def verify_blob(path: Path, digest: str, size: int, *, cache_dir: Path | None = None) -> None:
    actual_size = path.stat().st_size
    if actual_size != size:
        raise ModelSourceError(f"{path}: size {actual_size} does not match the manifest's {size}")
    if cached_digest(path, cache_dir) == digest:
        return
    actual = sha256_of_file(path)
    if actual != digest:
        raise ModelSourceError(f"{path}: sha256 {actual} does not match the manifest's {digest}")
    _cache_store(cache_dir, path, digest)
