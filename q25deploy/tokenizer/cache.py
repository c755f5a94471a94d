"""A content-addressed cache of tokenizer asset sets (like ccache): the assets depend only on
the model's sha256, the image alignment and the tool version, so a build of a model whose
tokenizer was already built (for another target, into another directory) copies them
instead of regenerating them. Entries are written atomically; files are copied out (not
linked), so nothing a user does to a build directory can change the cache. The index records
every file's sha256, and a lookup hands out only files whose bytes still match it (a flipped
byte in the cache means a miss and a rebuild, never a corrupt build)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from .. import schema
from ..common import cache_dir as default_cache_dir
from ..common import file_sha256, is_sha256, json_bytes, write_atomic
from ..errors import SchemaError

INDEX = "assets.json"


def _entry(key: str, cache_dir: Path | None) -> Path:
    if not is_sha256(key):  # a path part only as a sha256
        raise SchemaError(f"tokenizer cache key {key!r:.80} is not a sha256")
    return (cache_dir or default_cache_dir()) / "tokenizer" / key


def lookup(key: str, cache_dir: Path | None = None) -> tuple[Path, list[dict]] | None:
    """(directory, [{path, kind, sha256}]) of a complete, intact cached set, or None. A damaged
    entry (unreadable index, a file missing or changed) is removed and reported as a miss."""
    try:
        d = _entry(key, cache_dir)
        data = (d / INDEX).read_bytes()
    except (OSError, SchemaError):
        return None
    try:
        assets = schema.parse_asset_index(schema.loads(data, str(d / INDEX)), str(d / INDEX))
        if all(file_sha256(d / a["path"]) == a["sha256"] for a in assets):
            return d, assets
    except (OSError, SchemaError):
        pass
    shutil.rmtree(d, ignore_errors=True)
    return None


def store(key: str, assets: list, cache_dir: Path | None = None) -> None:
    """Save an asset set (objects with path, kind, data); failures only cost a regeneration."""
    try:
        d = _entry(key, cache_dir)
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=d.parent))
    except (OSError, SchemaError):
        return
    try:
        for a in assets:
            (tmp / a.path).write_bytes(a.data)
        index = [{"path": a.path, "kind": a.kind, "sha256": hashlib.sha256(a.data).hexdigest()} for a in assets]
        (tmp / INDEX).write_bytes(json_bytes(index))
        os.rename(tmp, d)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def smoke_lookup(image_sha256: str, key: str, cache_dir: Path | None = None) -> list[list[int]] | None:
    """The smoke prompts' ids an image's codec gave (``build``'s ``smoke_ids.json`` record,
    cached by ``key``: the image's sha256 and the tool version), or None. The record is input:
    read through its schema, for this image and exactly today's prompts, else a miss."""
    from .prompts import SMOKE_PROMPTS

    if not is_sha256(key):
        return None
    path = (cache_dir or default_cache_dir()) / "smoke" / f"{key}.json"
    try:
        sha, cases = schema.parse_smoke_ids(schema.loads(path.read_bytes(), str(path)), str(path))
    except (OSError, SchemaError):
        return None
    if sha != image_sha256 or [(text, special) for text, special, _ in cases] != list(SMOKE_PROMPTS):
        return None
    return [ids for _, _, ids in cases]


def smoke_store(record: dict, key: str, cache_dir: Path | None = None) -> None:
    """Save a ``smoke_ids.json`` record under ``key``; failures only cost the codec next time."""
    if not is_sha256(key):
        return
    try:
        write_atomic((cache_dir or default_cache_dir()) / "smoke" / f"{key}.json", json_bytes(record), sync=False)
    except OSError:
        pass
