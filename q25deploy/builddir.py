"""A build directory read as untrusted input: every file opened one path component at a time
with ``O_NOFOLLOW`` (a symlink anywhere is refused), every document through :mod:`q25deploy.schema`
(the build's own incremental-build stamp included: :meth:`BuildDir.stamp`)."""

from __future__ import annotations

import os
import stat
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from . import layout
from .errors import SchemaError
from .schema import (
    MAX_JSON,
    MAX_REGION_TABLE,
    MAX_STAMP,
    Artifact,
    BuildInfo,
    loads,
    parse_build_info,
    parse_forward_record,
    parse_manifest,
    parse_partition_map,
    parse_probe_digests,
    parse_region_table,
    parse_smoke_ids,
    parse_stamp,
    parse_tensor_table,
    rel_path,
)


def open_under(base: Path, rel: str, where: str = "") -> BinaryIO:
    """Open the regular file ``base/rel`` for reading without following a symlink in any part
    of ``rel`` (``base`` itself is the user's choice and may be one)."""
    rel_path(rel, where or str(base), "path")
    return _open_parts(base, rel.split("/"))


def _open_parts(base: Path, parts: list[str]) -> BinaryIO:
    """``base/PART/.../PART`` opened one part at a time, ``O_NOFOLLOW`` (and the last
    ``O_NONBLOCK``: a FIFO never blocks), a regular file after ``fstat``."""
    rel = "/".join(parts)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | getattr(os, "O_DIRECTORY", 0), dir_fd=fd)
            os.close(fd)
            fd = nxt
        nxt = os.open(parts[-1], flags | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
    except OSError as e:
        raise SchemaError(
            f"{base / rel}: cannot open ({'a symlink, refused' if e.errno in (40, 20) else e.strerror})"
        ) from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(nxt).st_mode):
        os.close(nxt)
        raise SchemaError(f"{base / rel}: not a regular file")
    return os.fdopen(nxt, "rb")


class BuildDir:
    """A ``q25deploy build`` directory, read only through the checks above."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read_json(self, rel: str, limit: int = MAX_JSON) -> Any:
        return self._json(open_under(self.path, rel), rel, limit)

    def _json(self, f: BinaryIO, rel: str, limit: int) -> Any:
        with f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise SchemaError(f"{self.path / rel}: larger than {limit:,} bytes")
        return loads(data, str(self.path / rel))

    def stamp(self) -> dict | None:
        """The incremental-build stamp (``.q25deploy-stamp.json``: a hidden name, outside the
        manifest) through its schema; None where there is none or it does not check out (a
        full build follows, as a bad cache entry is a miss)."""
        try:
            doc = self._json(_open_parts(self.path, [layout.STAMP]), layout.STAMP, MAX_STAMP)
            return parse_stamp(doc, str(self.path / layout.STAMP))
        except (OSError, SchemaError):
            return None

    @cached_property
    def manifest(self) -> dict[str, Artifact]:
        return parse_manifest(self.read_json(layout.MANIFEST), str(self.path / layout.MANIFEST))

    @cached_property
    def info(self) -> BuildInfo:
        return parse_build_info(self.read_json(layout.BUILD_INFO), str(self.path / layout.BUILD_INFO))

    @cached_property
    def partition_map(self) -> dict:
        return parse_partition_map(self.read_json(layout.PARTITION_MAP), str(self.path / layout.PARTITION_MAP))

    def check_region_table(self) -> list[dict]:
        """``partitions/regions.tab``: checked, and the same regions as the partition map
        (it is what ``q25tok load`` writes into physical memory on the board)."""
        where = str(self.path / layout.REGION_TABLE)
        with open_under(self.path, layout.REGION_TABLE) as f:
            rows = parse_region_table(f.read(MAX_REGION_TABLE + 1), where)
        planned = [
            {k: r[k] for k in ("node", "base", "size", "file", "used", "sha256")} for r in self.partition_map["regions"]
        ]
        if rows != planned:
            raise SchemaError(
                f"{where}: its regions differ from {layout.PARTITION_MAP}'s; rebuild with q25deploy build"
            )
        return rows

    def check_for(self, board) -> None:
        """What a board command reads of the build before it contacts any board: the manifest,
        ``build.json``, the partition map and the region table through the schema, and every
        region ours on ``board`` (its node name, inside a bank, clear of the board file's
        reservations: :mod:`q25deploy.board.ours`)."""
        from .board.ours import foreign

        _ = self.manifest, self.info
        why = foreign(board, self.partition_map["regions"])
        if why:
            raise SchemaError(f"{self.path / layout.PARTITION_MAP}: {why} (not a build for {board.name})")
        if layout.REGION_TABLE in self.manifest:
            self.check_region_table()

    @cached_property
    def smoke_ids(self) -> tuple[str, list[tuple[bytes, bool, list[int]]]] | None:
        """The smoke prompts' ids the build recorded, or None (a build by an older q25deploy)."""
        if layout.SMOKE_IDS not in self.manifest:
            return None
        return parse_smoke_ids(self.read_json(layout.SMOKE_IDS), str(self.path / layout.SMOKE_IDS))

    @cached_property
    def probe_digests(self) -> dict | None:
        """What ``q25tok probe`` must print on the board (``probe_digests.json``), or None (a
        build by an older q25deploy)."""
        if layout.PROBE_DIGESTS not in self.manifest:
            return None
        return parse_probe_digests(self.read_json(layout.PROBE_DIGESTS), str(self.path / layout.PROBE_DIGESTS))

    @cached_property
    def forward_record(self) -> dict | None:
        """The host reference's teacher-forced steps on the smoke prompts (``forward_record.json``,
        docs/forward.md), or None (an older q25deploy, or a model the forward pass cannot run)."""
        if layout.FORWARD_RECORD not in self.manifest:
            return None
        return parse_forward_record(self.read_json(layout.FORWARD_RECORD), str(self.path / layout.FORWARD_RECORD))

    @cached_property
    def tensor_table(self) -> list[dict] | None:
        """The tensor table's lines (``partitions/tensors.tab``), or None (a build by an older q25deploy)."""
        if layout.TENSOR_TABLE not in self.manifest:
            return None
        with open_under(self.path, layout.TENSOR_TABLE) as f:
            data = f.read(MAX_JSON + 1)
        where = str(self.path / layout.TENSOR_TABLE)
        if len(data) > MAX_JSON:
            raise SchemaError(f"{where}: larger than {MAX_JSON:,} bytes")
        return parse_tensor_table(data.decode("ascii", "replace"), where)

    def open(self, rel: str) -> BinaryIO:
        return open_under(self.path, rel)

    def check_file(self, rel: str) -> Path:
        """``rel`` is in the manifest and is a regular file of the recorded size here (no symlinks)."""
        a = self.manifest.get(rel)
        if a is None:
            raise SchemaError(f"{self.path}: {rel} is not in {layout.MANIFEST}; rebuild with q25deploy build")
        try:
            with self.open(rel) as f:
                actual = os.fstat(f.fileno()).st_size
        except SchemaError as e:
            raise SchemaError(f"{e}; rebuild with q25deploy build") from None
        if actual != a.size:
            raise SchemaError(
                f"{self.path / rel}: size {actual:,} differs from the build manifest's {a.size:,} "
                "(rebuild with q25deploy build)"
            )
        return self.path / rel
