"""Atomic output directories with a ``manifest.json``.

Everything a command writes goes into a temporary sibling directory first; only when all of
it is written does the temporary directory take the destination's place (see
:mod:`q25deploy.packer.replace`: only earlier q25deploy outputs are ever replaced, and the
destination is never missing). A failure (bad input, a full disk, Ctrl-C) leaves the
destination as it was, or absent.

``manifest.json`` lists every artifact with ``path``, ``kind``, ``size`` and ``sha256``,
sorted by path, with no time stamps, so the same inputs give a byte-identical manifest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from ..common import file_sha256, json_bytes
from ..errors import OutputError
from ..layout import MANIFEST
from .replace import MANIFEST_FORMAT, check_replaceable, exchange, remove_stale, temp_dir


def is_plain_relative(rel: str) -> bool:
    """A relative POSIX path of non-empty parts, none of them ``.`` or ``..``."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and "\\" not in rel and all(p not in ("", ".", "..") for p in parts)


class OutputDir:
    """``with OutputDir(dest, "build") as out: out.write("a.bin", data, kind="x")`` — atomic on exit.

    ``output`` names the kind of output (``build``, ``tokenizer``, ``tensors``, ``runtime``):
    it is recorded in the manifest, and DEST is replaced only when it is absent, empty, or an
    earlier output of the same kind with nothing in it q25deploy did not write."""

    def __init__(self, dest: str | os.PathLike[str], output: str, *, extra_manifest: dict | None = None) -> None:
        self.dest = Path(os.path.abspath(dest))
        if self.dest.is_symlink():  # replace what the link points to; the link stays
            self.dest = self.dest.resolve()
        self.output = output
        self.artifacts: dict[str, dict] = {}
        self.extra_manifest = extra_manifest or {}
        check_replaceable(self.dest, output)
        try:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            remove_stale(self.dest)
            self.tmp = temp_dir(self.dest)
        except OSError as e:
            raise OutputError(f"{self.dest.parent}: cannot create output directory: {e.strerror}") from None

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, rel: str) -> Path:
        """Where ``rel`` is written before the commit (for writers that need a path)."""
        if not is_plain_relative(rel):
            raise OutputError(f"refusing to write {rel!r}: not a plain relative path inside {self.dest}")
        p = self.tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def record(self, rel: str, kind: str, *, sha256: str | None = None) -> None:
        """Record a file already written at :meth:`path` (hashing it unless given)."""
        p = self.tmp / rel
        if sha256 is None:
            sha256 = file_sha256(p)
        self.artifacts[rel] = {"path": rel, "kind": kind, "size": p.stat().st_size, "sha256": sha256}

    def write(self, rel: str, data: bytes, kind: str) -> None:
        try:
            self.path(rel).write_bytes(data)
        except OSError as e:
            raise OutputError(f"{self.dest / rel}: cannot write: {e.strerror}") from None
        self.artifacts[rel] = {"path": rel, "kind": kind, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def write_json(self, rel: str, obj: Any, kind: str) -> None:
        self.write(rel, json_bytes(obj), kind)

    def manifest(self) -> dict:
        m = {"format": MANIFEST_FORMAT, "output": self.output, **self.extra_manifest}
        m["artifacts"] = [self.artifacts[k] for k in sorted(self.artifacts)]
        return m

    def commit(self) -> None:
        try:
            (self.tmp / MANIFEST).write_bytes(json_bytes(self.manifest()))
            os.chmod(self.tmp, 0o755)
            exchange(self.tmp, self.dest)
        except OSError as e:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise OutputError(f"{self.dest}: cannot finish writing: {e.strerror}") from None
