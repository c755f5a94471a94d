"""Tensor payloads: tensor data into partition files, one pass per byte.

Every byte of tensor data lands at its place in a partition and feeds its tensor's sha256 and
its partition's (tensors at their offsets, zero gaps), and the file's when the model's digest is
not known yet. :func:`pack` does all of it in one pass, the way tools that move gigabytes do:

- **share** — where the filesystem shares blocks between files (``FICLONERANGE``: XFS, Btrfs)
  and a tensor lies at the same offset modulo the block size in the GGUF and in its partition,
  its whole blocks are cloned: the partition shares the GGUF's bytes, nothing is copied;
- **one read** — the source is read once, sequentially, in 1 MiB chunks through a ring of four
  buffers (constant memory whatever the model's size);
- **one write** — each chunk's bytes that are not shared are written from that buffer;
- **one hash per digest** — each chunk goes, in order, to one thread per digest stream (the
  tensors', the partitions' with the writes, the file's): hashlib and ``os.pwrite`` release
  the GIL, so on two cores the streams run side by side while the reader fills the next buffer.
  A partition that is one whole tensor at offset 0 (``export tensors``) takes that tensor's
  digest; a partition whose tensors are not in source order is hashed from its file at the end.

When no digest is wanted (the build took them from the content cache), the bytes not shared are
copied 1 MiB at a time through one buffer (``preadv``, ``pwrite``: the GIL is released for
both). On ext4 that is as fast as ``cp`` of the whole file; ``copy_file_range`` at a tensor's
shifted offset in its partition was 30 % slower (it splices 64 KiB at a time; measured in
docs/benchmarks.md). A copy can be stopped between chunks (:class:`Stopped`: a build that failed
or was interrupted while its partitions were copied).
:class:`Packed` says what happened (shared, copied, hashed bytes).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..common import file_sha256
from ..errors import GGUFError, OutputError

if TYPE_CHECKING:
    from concurrent.futures import Future

CHUNK = 1 << 20  # a pass's chunk: small enough to stay in the caches between its readers
RING = 4  # chunks in flight: the reader fills one while the digest streams work on the others
_PLAIN = re.compile(r"[A-Za-z0-9._-]+")


def check_plain_names(tensors) -> None:
    """Tensor names become file names and C identifiers: only plain names are accepted."""
    for t in tensors:
        if not _PLAIN.fullmatch(t.name) or ".." in t.name:
            raise GGUFError(
                f"tensor name {t.name[:80]!r} is not a plain name (allowed: A-Z a-z 0-9 . _ -, no '..'); "
                "refusing to use it as a file name"
            )


_ZEROS = bytes(1 << 16)


@dataclass(frozen=True)
class Piece:
    """A source byte range that lands at ``dst_offset`` of output ``dst`` (key of a stream)."""

    key: str  # tensor name
    src_offset: int
    nbytes: int
    dst: int  # output (partition) index, or -1 for none
    dst_offset: int


class Stopped(Exception):
    """:func:`pack` was told to stop (its ``stop`` event was set) before it finished."""


def _copy(src: int, dst: int, lo: int, hi: int, shift: int, buf: memoryview, stop) -> None:
    """Source bytes ``lo:hi`` to ``lo + shift`` in ``dst``, a buffer at a time."""
    while lo < hi:
        if stop is not None and stop.is_set():
            raise Stopped()
        n = os.preadv(src, [buf[: min(len(buf), hi - lo)]], lo)
        if n <= 0:
            raise OutputError("copying tensor data failed: the model file ended early")
        _pwrite(dst, buf[:n], lo + shift)
        lo += n


@dataclass(frozen=True)
class Packed:
    """What :func:`pack` did: the digests asked for, and how the bytes got there."""

    file: str | None  # the source file's sha256 (when asked)
    pieces: dict[str, str]  # each piece's sha256 (when asked)
    outputs: list[str]  # each output's sha256 (when asked)
    shared: int  # bytes the outputs share with the source (cloned blocks)
    copied: int  # bytes written into the outputs
    read: int  # source bytes read to hash


FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range), Linux x86-64 and arm64


def _clone(src_fd: int, dst_fd: int, src_off: int, n: int, dst_off: int) -> None:
    import fcntl

    fcntl.ioctl(dst_fd, FICLONERANGE, struct.pack("qQQQ", src_fd, src_off, n, dst_off))


@dataclass
class _Target:
    """One placed piece: the source ranges still to write (the rest is shared)."""

    piece: Piece
    write: list[tuple[int, int]] = field(default_factory=list)


def _share(src: int, fds: list[int], placed: list[Piece]) -> tuple[list[_Target], int]:
    """Clone each piece's whole blocks where the filesystem can; the rest is left to write."""
    try:
        blk = os.fstatvfs(src).f_frsize or 4096
    except OSError:
        blk = 4096
    targets, shared, can = [], 0, hasattr(os, "uname") and os.uname().sysname == "Linux"
    for p in placed:
        t = _Target(p)
        lo, hi = -(-p.src_offset // blk) * blk, (p.src_offset + p.nbytes) // blk * blk
        if can and hi > lo and (p.src_offset - p.dst_offset) % blk == 0:
            try:
                _clone(src, fds[p.dst], lo, hi - lo, p.dst_offset + lo - p.src_offset)
            except OSError:
                can = False  # no block sharing here (ext4, tmpfs, another filesystem): copy
        if can and hi > lo and (p.src_offset - p.dst_offset) % blk == 0:
            shared += hi - lo
            t.write = [(a, b) for a, b in ((p.src_offset, lo), (hi, p.src_offset + p.nbytes)) if a < b]
        else:
            t.write = [(p.src_offset, p.src_offset + p.nbytes)] if p.nbytes else []
        targets.append(t)
    return targets, shared


def _in_order(targets: list[_Target], n_outputs: int) -> set[int]:
    """Outputs whose pieces, in source order, do not follow each other: hashed from the file."""
    late, end = set(), [0] * n_outputs
    for t in sorted(targets, key=lambda t: t.piece.src_offset):
        p = t.piece
        if p.dst_offset < end[p.dst]:
            late.add(p.dst)
        end[p.dst] = max(end[p.dst], p.dst_offset + p.nbytes)
    return late


def _pwrite(fd: int, data: memoryview, off: int) -> None:
    try:
        while data:
            n = os.pwrite(fd, data, off)
            data, off = data[n:], off + n
    except OSError as e:
        raise OutputError(f"writing a partition failed: {e.strerror}") from None


def _zero_fill(h, n: int) -> None:
    while n > 0:
        k = min(n, len(_ZEROS))
        h.update(_ZEROS[:k])
        n -= k


def pack(
    src_path: str,
    pieces: Sequence[Piece],
    dst_paths: Sequence[str],
    sizes: Sequence[int],
    *,
    hash_pieces: bool = True,
    hash_outputs: bool = True,
    file_digest: bool = False,
    stop: threading.Event | None = None,
) -> Packed:
    """Create each output at its size (sparse: gaps read as zeros), put the pieces in (shared
    or written) and compute the digests asked for, reading each source byte at most once.
    ``stop``: checked between chunks of a copy that computes no digest (:class:`Stopped`)."""
    src = os.open(src_path, os.O_RDONLY)
    fds: list[int] = []
    try:
        for path, size in zip(dst_paths, sizes):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                fds.append(fd)
                os.ftruncate(fd, size)
            except OSError as e:
                raise OutputError(f"{path}: cannot write: {e.strerror}") from None
        targets, shared = _share(src, fds, [p for p in pieces if p.dst >= 0])
        copied = sum(b - a for t in targets for a, b in t.write)
        if not (hash_pieces or hash_outputs or file_digest):
            buf = memoryview(bytearray(CHUNK))
            for t in targets:
                for a, b in t.write:
                    _copy(src, fds[t.piece.dst], a, b, t.piece.dst_offset - t.piece.src_offset, buf, stop)
            return Packed(None, {}, [], shared, copied, 0)
        return _pass(
            src, pieces, targets, fds, dst_paths, sizes, hash_pieces, hash_outputs, file_digest, shared, copied
        )
    finally:
        os.close(src)
        for fd in fds:
            os.close(fd)


def _spans(pieces: Sequence[Piece], size: int, whole: bool) -> list[tuple[int, int]]:
    """The source ranges to read: the whole file, or the union of the pieces' ranges."""
    if whole:
        return [(0, size)]
    spans: list[list[int]] = []
    for p in sorted(pieces, key=lambda p: p.src_offset):
        if spans and p.src_offset <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], p.src_offset + p.nbytes)
        elif p.nbytes:
            spans.append([p.src_offset, p.src_offset + p.nbytes])
    return [(a, b) for a, b in spans]


def _pass(src, pieces, targets, fds, dst_paths, sizes, hash_pieces, hash_outputs, file_digest, shared, copied):
    """The single sequential read, feeding the digest streams and the writes, in order."""
    n_out = len(fds)
    by_src = sorted(pieces, key=lambda p: p.src_offset)
    write_of = {id(t.piece): t.write for t in targets}
    # a partition that is exactly one tensor: its digest is the tensor's
    alias: dict[int, str] = {}
    if hash_pieces:
        counts = [0] * n_out
        for t in targets:
            counts[t.piece.dst] += 1
        alias = {
            t.piece.dst: t.piece.key
            for t in targets
            if counts[t.piece.dst] == 1 and t.piece.dst_offset == 0 and t.piece.nbytes == sizes[t.piece.dst]
        }
    late = _in_order(targets, n_out) if hash_outputs else set()
    piece_h = {p.key: hashlib.sha256() for p in by_src} if hash_pieces else {}
    out_h = {i: hashlib.sha256() for i in range(n_out) if hash_outputs and i not in alias and i not in late}
    out_pos = [0] * n_out
    file_h = hashlib.sha256() if file_digest else None

    def tensors(chunk: memoryview, pos: int, hits: list[Piece]) -> None:
        for p in hits:
            a, b = max(p.src_offset, pos), min(p.src_offset + p.nbytes, pos + len(chunk))
            piece_h[p.key].update(chunk[a - pos : b - pos])

    def outputs(chunk: memoryview, pos: int, hits: list[Piece]) -> None:
        end = pos + len(chunk)
        for p in hits:
            if p.dst < 0:
                continue
            a, b = max(p.src_offset, pos), min(p.src_offset + p.nbytes, end)
            shift = p.dst_offset - p.src_offset
            for wa, wb in write_of[id(p)]:
                lo, hi = max(a, wa), min(b, wb)
                if lo < hi:
                    _pwrite(fds[p.dst], chunk[lo - pos : hi - pos], lo + shift)
            h = out_h.get(p.dst)
            if h is not None:
                _zero_fill(h, a + shift - out_pos[p.dst])
                h.update(chunk[a - pos : b - pos])
                out_pos[p.dst] = b + shift

    from concurrent.futures import ThreadPoolExecutor  # the hashing pass's alone: a copy's start stays light

    streams: list[Callable[[memoryview, int, list[Piece]], None]] = [outputs]
    if hash_pieces:
        streams.append(tensors)
    if file_h is not None:
        streams.append(lambda chunk, pos, hits: file_h.update(chunk))
    pools = [ThreadPoolExecutor(max_workers=1) for _ in streams]  # one per stream: in order
    ring = [bytearray(CHUNK) for _ in range(RING)]
    busy: list[list[Future]] = [[] for _ in range(RING)]
    read = 0
    try:
        size = os.fstat(src).st_size
        k, i = 0, 0  # k: first piece not finished; i: chunks read
        for lo, hi in _spans(pieces, size, file_h is not None):
            pos = lo
            while pos < hi:
                slot = i % RING
                for fut in busy[slot]:
                    fut.result()  # this buffer's last chunk is done (a stream's error raises here)
                want = min(CHUNK, hi - pos)
                n = os.preadv(src, [memoryview(ring[slot])[:want]], pos)
                if n <= 0:
                    raise OutputError("the model file changed while it was read")
                chunk, end = memoryview(ring[slot])[:n], pos + n
                while k < len(by_src) and by_src[k].src_offset + by_src[k].nbytes <= pos:
                    k += 1
                hits = []
                j = k
                while j < len(by_src) and by_src[j].src_offset < end:
                    if by_src[j].src_offset + by_src[j].nbytes > pos:
                        hits.append(by_src[j])
                    j += 1
                busy[slot] = [pool.submit(fn, chunk, pos, hits) for pool, fn in zip(pools, streams)]
                read += n
                pos, i = end, i + 1
        for futs in busy:
            for fut in futs:
                fut.result()
    finally:
        for pool in pools:
            pool.shutdown(wait=True)
    for i, h in out_h.items():
        _zero_fill(h, sizes[i] - out_pos[i])
    digests = {k: h.hexdigest() for k, h in piece_h.items()}
    outs: list[str] = []
    if hash_outputs:
        for i in range(n_out):
            if i in alias:
                outs.append(digests[alias[i]])
            elif i in late:
                outs.append(file_sha256(dst_paths[i]))
            else:
                outs.append(out_h[i].hexdigest())
    return Packed(file_h.hexdigest() if file_h else None, digests, outs, shared, copied, read)
