"""Reproducible archives: tar (ustar), gzip and cpio "newc" with fixed metadata.

Every entry has mtime 0, uid/gid 0, no user or group names and a fixed mode; entries are
written in the order given; gzip streams carry no name and mtime 0. The same inputs give
the same bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20
GZIP_LEVEL = 6


@dataclass(frozen=True)
class Entry:
    """One archive member: bytes in memory or a file on disk."""

    name: str
    data: bytes | None = None
    path: Path | None = None
    mode: int = 0o644

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self._file().stat().st_size

    def open(self) -> BinaryIO:
        return io.BytesIO(self.data) if self.data is not None else self._file().open("rb")

    def _file(self) -> Path:
        if self.path is None:
            raise ValueError(f"archive entry {self.name} has neither data nor a path")
        return self.path


def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = size, mode, 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def write_tar(out: BinaryIO | gzip.GzipFile, entries: Iterable[Entry]) -> None:
    """A ustar archive of ``entries`` (in order) onto ``out``."""
    # "w", not the stream mode "w|": the same bytes, but members are copied in CHUNK pieces
    # (the stream's 16 KiB writes through its record buffer are much slower)
    with tarfile.TarFile(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT, copybufsize=CHUNK) as tar:
        for e in entries:
            with e.open() as src:
                tar.addfile(_tarinfo(e.name, e.size, e.mode), src)


def tar_bytes(entries: Iterable[Entry]) -> bytes:
    buf = io.BytesIO()
    write_tar(buf, entries)
    return buf.getvalue()


def gzip_open(out: BinaryIO) -> gzip.GzipFile:
    """A gzip writer with no file name and mtime 0 (a deterministic header)."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=GZIP_LEVEL, mtime=0)


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip_open(buf) as gz:
        gz.write(data)
    return buf.getvalue()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


# -- cpio "newc" (SVR4 without CRC), as SWUpdate reads it -------------------------------
_NEWC_MAGIC = b"070701"


def _pad4(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _newc_header(name: str, size: int, mode: int, ino: int) -> bytes:
    raw = name.encode() + b"\0"
    fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        size,
        0,
        0,
        0,
        0,
        len(raw),
        0,
    ]  # ino mode uid gid nlink mtime size maj min rmaj rmin namesize check
    head = _NEWC_MAGIC + b"".join(b"%08X" % v for v in fields) + raw
    return head + _pad4(len(head))


def write_cpio(out: BinaryIO, entries: Iterable[Entry]) -> None:
    """A cpio newc archive of ``entries`` (in order, regular files) with its trailer."""
    ino = 0
    for ino, e in enumerate(entries, start=1):
        size = e.size
        out.write(_newc_header(e.name, size, 0o100000 | e.mode, ino))
        with e.open() as src:
            shutil.copyfileobj(src, out, CHUNK)
        out.write(_pad4(size))
    out.write(_newc_header("TRAILER!!!", 0, 0, 0))
