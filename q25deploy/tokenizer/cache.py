"""A content-addressed cache of tokenizer asset sets (like ccache): the assets depend only on
the model's sha256, the image alignment and the tool version, so a build of a model whose
tokenizer was already built (for another target, into another directory) copies them
instead of regenerating them. Entries are written atomically; files are copied out (not
linked), so nothing a user does to a build directory can change the cache."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..common import cache_dir as default_cache_dir
from ..common import json_bytes

INDEX = "assets.json"


def _entry(key: str, cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_dir()) / "tokenizer" / key


def lookup(key: str, cache_dir: Path | None = None) -> tuple[Path, list[dict]] | None:
    """(directory, [{path, kind}]) of a complete cached set, or None."""
    d = _entry(key, cache_dir)
    try:
        assets = json.loads((d / INDEX).read_text("utf-8"))
        if all((d / a["path"]).is_file() for a in assets):
            return d, assets
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def store(key: str, assets: list, cache_dir: Path | None = None) -> None:
    """Save an asset set (objects with path, kind, data); failures only cost a regeneration."""
    d = _entry(key, cache_dir)
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=d.parent))
    except OSError:
        return
    try:
        for a in assets:
            (tmp / a.path).write_bytes(a.data)
        (tmp / INDEX).write_bytes(json_bytes([{"path": a.path, "kind": a.kind} for a in assets]))
        os.rename(tmp, d)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
