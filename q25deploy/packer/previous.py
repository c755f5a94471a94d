"""The last build in an output directory, read as untrusted input: what of it may be reused.

A stage is reused (hard-linked) only when its content key is unchanged and every file it
needs is a regular file of this user's inside DIR (no symlink on the way: a file another
user owns is theirs to change after we linked it), listed in the last manifest with a plain
relative path, a kind, a size and a sha256; a partition map is trusted for tensor digests
only when it is well formed and names exactly the model's tensors.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, cast

from ..builddir import BuildDir
from ..common import is_sha256
from ..errors import SchemaError
from .outputs import OutputDir, is_plain_relative


class Previous:
    """The last build in DIR: its stage keys and artifacts, for hard-linking unchanged stages."""

    def __init__(self, out: Path, stamp: dict | None) -> None:
        self.out = out
        self.keys = (stamp or {}).get("keys", {})
        last = BuildDir(out)  # every file opened without following a link, through the schema
        try:
            self.partition_map = last.partition_map
        except (OSError, SchemaError):
            self.partition_map = {}
        try:  # all of it checked, or nothing reused
            listed = last.manifest
        except (OSError, SchemaError):
            listed = {}
        self.artifacts: dict[str, dict[str, Any]] = {
            rel: {"kind": a.kind, "sha256": a.sha256, "size": a.size} for rel, a in listed.items()
        }

    def tensor_digests(self, names: set[str]) -> dict[str, str] | None:
        """Each tensor's sha256 from the last partition map, when it is well formed and names exactly ``names``."""
        tensors = self.partition_map.get("tensors")
        if not isinstance(tensors, list):
            return None
        found = {t.get("name"): t.get("sha256") for t in tensors if isinstance(t, dict)}
        ok = set(found) == names and len(found) == len(tensors) and all(is_sha256(s) for s in found.values())
        return cast("dict[str, str]", found) if ok else None

    def has(self, rel: str) -> bool:
        """A regular file of the last build that this user owns (never a symlink, never outside
        DIR) listed in its manifest."""
        if rel not in self.artifacts or not is_plain_relative(rel):
            return False
        try:
            st = os.lstat(self.out / rel)
            return (
                stat.S_ISREG(st.st_mode)
                and st.st_uid == os.geteuid()
                and not any(os.path.islink(self.out / parent) for parent in Path(rel).parents if str(parent) != ".")
            )
        except OSError:
            return False

    def reuse(self, o: OutputDir, stage: str, key: str | None, rels: list[str]) -> bool:
        """Link every file of a stage whose content key is unchanged (all of them or none)."""
        if not (key and self.keys.get(stage) == key and rels and all(self.has(r) for r in rels)):
            return False
        for rel in rels:
            os.link(self.out / rel, o.path(rel))
            o.record(rel, self.artifacts[rel]["kind"], sha256=self.artifacts[rel]["sha256"])
        return True
