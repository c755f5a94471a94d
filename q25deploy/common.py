"""Small helpers every subpackage shares, so there is one of each: a file's sha256, canonical
JSON (for files and for content keys), sizes for people, text for a terminal, and a file
written atomically and exclusively."""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

CHUNK = 1 << 22


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic-GC passes meanwhile: for work that makes hundreds of thousands of small objects
    without cycles (a vocabulary's tokens and merges), where each pass would walk the whole heap
    for nothing (a third of the vocabulary's parse in a process with a large heap)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, read in constant memory."""
    with open(path, "rb") as f:
        return stream_sha256(f)


def stream_sha256(f: BinaryIO) -> str:
    """The sha256 of what is left in a binary stream."""
    if hasattr(hashlib, "file_digest"):  # Python 3.11+: the loop in C, no Python-level copies
        return hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[arg-type,unused-ignore]  # typeshed wants readinto (3.11+)
    h = hashlib.sha256()
    while chunk := f.read(CHUNK):
        h.update(chunk)
    return h.hexdigest()


def json_bytes(obj: Any) -> bytes:
    """Canonical JSON for files: sorted keys, two-space indent, UTF-8 (not \\u escapes), a final newline."""
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def read_json(path: Path) -> dict | None:
    """A JSON object from a file, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text("utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(v: object) -> bool:
    """A sha256 as q25deploy writes it: 64 lower-case hex digits. The only digest (or content
    key) read from a file that may become part of a path."""
    return isinstance(v, str) and _SHA256.fullmatch(v) is not None


def json_digest(obj: Any) -> str:
    """The sha256 of an object's compact canonical JSON: a content key (release ids, build stages)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def printable(text: object) -> str:
    """Text from outside (model metadata, a board's answers) for a terminal: control characters
    (escape sequences, newlines, C1 controls) shown as ``\\xNN``, so it cannot move the cursor,
    clear the screen or fake a line of its own."""
    return str(text).translate(_CONTROL)


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int | None:
    """``1GiB``, ``512 MiB``, ``768M``, ``0x40000000`` or plain bytes -> bytes; None when not a size."""
    m = re.fullmatch(r"\s*(0x[0-9a-f]+|[0-9]+)\s*(?:([kmg])(?:i?b)?|b)?\s*", text, re.IGNORECASE)
    return int(m.group(1), 0) * _UNITS.get((m.group(2) or "").lower(), 1) if m else None


def format_size(n: int) -> str:
    """A size for people, in binary units: ``2 GiB`` when exact, else one decimal (``1.5 MiB``)."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}" if n % div == 0 else f"{n / div:.1f} {unit}"
    return f"{n} B"


def cache_dir() -> Path:
    """q25deploy's cache folder: ``$XDG_CACHE_HOME/q25deploy`` or ``~/.cache/q25deploy``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "q25deploy"


_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _temporary_name(path: Path) -> Path:
    """A name beside ``path`` no one can guess (``.NAME.RANDOM.tmp``)."""
    return path.with_name(f".{path.name}.{os.urandom(8).hex()}.tmp")


def _create_exclusive(path: Path) -> tuple[int, Path]:
    """A new file (mode 0600) beside ``path``, opened ``O_CREAT|O_EXCL|O_NOFOLLOW``: never a
    file or link that was there already (a name taken is skipped for another)."""
    for _ in range(100):
        tmp = _temporary_name(path)
        try:
            return os.open(tmp, _EXCLUSIVE, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


@contextmanager
def atomic_file(path: str | os.PathLike[str], mode: int = 0o644, *, sync: bool = True) -> Iterator[BinaryIO]:
    """The one way q25deploy writes a file in place: through a new temporary file beside it
    (:func:`_create_exclusive`: a random name, ``O_CREAT|O_EXCL|O_NOFOLLOW``, so a link or
    file planted in the folder is never written through), given ``mode`` by its descriptor,
    synced (``sync``) and renamed over ``path`` when the block ends without an exception (else
    removed): readers see the old file or the whole new one, and a link at ``path`` is
    replaced, never followed. ``OSError`` propagates (callers name what failed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_exclusive(path)
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), mode)
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        done = True
    finally:
        if not done:
            with suppress(OSError):
                os.unlink(tmp)


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """``data`` into ``path`` through :func:`atomic_file`."""
    with atomic_file(path, mode, sync=sync) as f:
        f.write(data)
