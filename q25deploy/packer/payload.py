"""Tensor payloads: kernel copies out of the GGUF and one hashing pass over it.

Copies use ``os.copy_file_range`` (``sendfile``, then read/write, where the kernel or the
filesystem refuses), straight from the source file into sparse destination files, so the
payload never passes through Python objects. Digests come from one sequential read of the
source with a fixed 4 MiB buffer: the file's sha256, each tensor's and each partition
file's (tensors at their offsets, zero gaps) at once, in constant memory.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import GGUFError, OutputError

CHUNK = 1 << 22
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


def copy_range(src_fd: int, dst_fd: int, count: int, src_off: int, dst_off: int) -> None:
    """Copy ``count`` bytes between file descriptors at the given offsets, in the kernel."""
    done = 0
    use = "copy_file_range" if hasattr(os, "copy_file_range") else "sendfile"
    while done < count:
        n = count - done
        try:
            if use == "copy_file_range":
                got = os.copy_file_range(src_fd, dst_fd, n, src_off + done, dst_off + done)
            elif use == "sendfile":
                os.lseek(dst_fd, dst_off + done, os.SEEK_SET)
                got = os.sendfile(dst_fd, src_fd, src_off + done, n)
            else:
                data = os.pread(src_fd, min(n, CHUNK), src_off + done)
                got = os.pwrite(dst_fd, data, dst_off + done)
        except OSError as e:
            if e.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP) and use != "rw":
                use = "sendfile" if use == "copy_file_range" else "rw"
                continue
            raise OutputError(f"copying tensor data failed: {e.strerror}") from None
        if got == 0:
            raise OutputError("copying tensor data failed: the source ended early")
        done += got


def write_outputs(src_path: str, pieces: Sequence[Piece], dst_paths: Sequence[str], sizes: Sequence[int]) -> None:
    """Create each output at its size (sparse: gaps read as zeros) and copy the pieces in."""
    src = os.open(src_path, os.O_RDONLY)
    fds = []
    try:
        for path, size in zip(dst_paths, sizes):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            fds.append(fd)
            os.ftruncate(fd, size)
        for p in pieces:
            if p.dst >= 0:
                copy_range(src, fds[p.dst], p.nbytes, p.src_offset, p.dst_offset)
    finally:
        os.close(src)
        for fd in fds:
            os.close(fd)


@dataclass(frozen=True)
class Digests:
    file: str | None
    pieces: dict[str, str]
    outputs: list[str]


def digest_pass(
    src_path: str,
    pieces: Sequence[Piece],
    n_outputs: int,
    sizes: Sequence[int],
    file_digest: bool,
    streams: str = "both",
) -> Digests:
    """One sequential read: the file's sha256 (if asked), each piece's, each output's.

    ``streams`` = ``"pieces"`` or ``"outputs"`` computes only that half (the two halves can
    run in two threads, each reading the page-cached file)."""
    order = sorted(pieces, key=lambda p: p.src_offset)
    do_pieces, do_outputs = streams in ("both", "pieces"), streams in ("both", "outputs")
    piece_h = {p.key: hashlib.sha256() for p in order} if do_pieces else {}
    out_h = [hashlib.sha256() for _ in range(n_outputs)] if do_outputs else []
    out_pos = [0] * n_outputs
    file_h = hashlib.sha256() if file_digest else None
    buf = bytearray(CHUNK)
    view = memoryview(buf)

    def zero_fill(h, n):
        while n > 0:
            k = min(n, len(_ZEROS))
            h.update(_ZEROS[:k])
            n -= k

    with open(src_path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        # without a file digest only the tensor ranges need reading
        spans = [(0, size)] if file_h else [(p.src_offset, p.src_offset + p.nbytes) for p in order]
        k = 0  # first piece not finished
        for lo, hi in spans:
            pos = lo
            while pos < hi:
                n = f.readinto(view[: min(CHUNK, hi - pos)]) if f.seek(pos) == pos else 0
                if not n:
                    raise OutputError(f"{src_path}: the file changed while it was read")
                chunk = view[:n]
                if file_h:
                    file_h.update(chunk)
                end = pos + n
                j = k
                while j < len(order) and order[j].src_offset < end:
                    p = order[j]
                    a, b = max(p.src_offset, pos), min(p.src_offset + p.nbytes, end)
                    if a < b:
                        part = chunk[a - pos : b - pos]
                        if do_pieces:
                            piece_h[p.key].update(part)
                        if do_outputs and p.dst >= 0:
                            at = p.dst_offset + (a - p.src_offset)
                            zero_fill(out_h[p.dst], at - out_pos[p.dst])
                            out_h[p.dst].update(part)
                            out_pos[p.dst] = at + (b - a)
                    if p.src_offset + p.nbytes <= end and j == k:
                        k += 1
                    j += 1
                pos = end
    for i in range(len(out_h)):
        zero_fill(out_h[i], sizes[i] - out_pos[i])
    return Digests(
        file_h.hexdigest() if file_h else None,
        {k: h.hexdigest() for k, h in piece_h.items()},
        [h.hexdigest() for h in out_h],
    )
