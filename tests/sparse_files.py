"""Sparse files that stand in for DDR (``--mem``, a board root's ``dev/mem``): spans of
gigabytes of addresses of which a test writes a few KiB. Reading one whole to ask "was anything
written" cost tens of seconds a test; these read only the file's data extents."""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 16 << 20


def extents(fd: int) -> list[tuple[int, int]]:
    """The (start, end) of each extent the filesystem holds data for (all of the file where it
    cannot tell holes apart: SEEK_DATA then reports data everywhere)."""
    size, spans, pos = os.fstat(fd).st_size, [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: nothing but a hole from pos to the end
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        spans.append((start, end))
        pos = end
    return spans


def written(path: Path) -> bool:
    """Whether any byte of ``path`` is not zero."""
    return not zero_between(path, 0, os.stat(path).st_size)


def zero_between(path: Path, start: int, end: int) -> bool:
    """Whether bytes ``[start, end)`` of ``path`` all read as zero (holes are zero)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for lo, hi in extents(fd):
            lo, hi = max(lo, start), min(hi, end)
            for off in range(lo, hi, CHUNK):
                if os.pread(fd, min(CHUNK, hi - off), off).strip(b"\0"):
                    return False
    finally:
        os.close(fd)
    return True


def read_at(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)
