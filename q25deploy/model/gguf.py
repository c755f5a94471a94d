"""A fast, strict reader of GGUF v2/v3 metadata and tensor infos.

The file is memory-mapped; tensor data is never read here. String arrays (a tokenizer's
~300k strings) are kept as lazy :class:`StringArray` views whose elements are only sliced
out when asked for, which is what makes opening a vocabulary GGUF take milliseconds where
``gguf.GGUFReader`` builds one numpy array per string.

Every count, length and offset is checked against the file size before anything is
allocated, so a hostile file fails at once with a :class:`~q25deploy.errors.GGUFError`.
Layout facts (magic, value types, quant block sizes) come from the ``gguf`` package.
This module holds the file object and the tensor directory; the bounds-checked reading of
metadata values is :mod:`q25deploy.model.gguf_values`.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from ..errors import GGUFError
from .gguf_values import MAX_ARRAY_DEPTH, PLAUSIBLE_END, U32, U64, StringArray, ValueReader

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

__all__ = [
    "DEFAULT_ALIGNMENT",
    "GGML_MAX_DIMS",
    "GGUF_MAGIC",
    "MAX_ARRAY_DEPTH",
    "GGUFFile",
    "StringArray",
    "TensorInfo",
]

_KNOWN_TYPES = {int(t) for t in GGMLQuantizationType}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's directory entry. ``shape`` is in GGUF order (ne0 = row length first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the data section
    data_offset: int  # absolute offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.ggml_type).name

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class GGUFFile:
    """A parsed GGUF file. Use as a context manager, or call :meth:`close`.

    Attributes: ``path``, ``size``, ``version``, ``metadata`` (key → value: int, float, bool,
    str, a numpy array, a :class:`StringArray`, or a list for nested arrays), ``value_types``
    (key → GGUF value type, and for arrays ``(ARRAY, element type)``), ``tensors`` (in file
    order), ``alignment`` and ``data_start``.
    """

    def __init__(self, path: str | os.PathLike[str], *, refetch: str | None = None) -> None:
        self.path = os.fspath(path)
        self._refetch = refetch  # how to fetch it again, for a truncated file's error
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise GGUFError(f"{self.path}: no such file") from None
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot open: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise GGUFError(f"{self.path}: is not a regular file")
            self.size = st.st_size
            self.mtime_ns = st.st_mtime_ns
            if self.size < 24:
                if os.pread(fd, 4, 0) == GGUF_MAGIC:
                    raise ValueReader(memoryview(b""), self.size, self.path, refetch).truncated(
                        24, "header", at_least=True
                    )
                raise GGUFError(f"{self.path}: not a GGUF file ({self.size} bytes, too short)")
            self._mmap = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # for read(): tensor data read, not mapped
        self._buf = memoryview(self._mmap)
        try:
            self._parse()
        except GGUFError:
            self.close()
            raise
        except (struct.error, ValueError, IndexError) as e:  # defensive: never a traceback
            self.close()
            raise GGUFError(f"{self.path}: malformed GGUF ({e})") from None

    # -- context management -------------------------------------------------------------
    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the mapping. Views (numpy arrays, string arrays) must not outlive it."""
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            self._fd = -1
            os.close(fd)
        buf = getattr(self, "_buf", None)
        if buf is not None:
            self._buf = None  # type: ignore[assignment]
            self.metadata: dict[str, Any] = {}
            try:
                buf.release()
                self._mmap.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes with the last reference

    @property
    def buffer(self) -> memoryview:
        """The whole mapped file (read-only)."""
        return self._buf

    # -- parsing ------------------------------------------------------------------------
    def _parse(self) -> None:
        r = ValueReader(self._buf, self.size, self.path, self._refetch)
        self.version = _read_version(r)
        n_tensors, n_kv = _read_counts(r)
        self.metadata, self.value_types, off = _read_metadata(r, 24, n_kv)
        self.alignment = align = _read_alignment(r, self.metadata, self.value_types)
        infos, off = _read_tensor_infos(r, off, n_tensors)
        self.data_start = -(-off // align) * align
        tensors = _place_tensors(r, infos, self.data_start, align)
        if tensors and self.data_start > self.size:
            raise r.truncated(self.data_start, "header (padding before the tensor data)")
        self.tensors = tensors
        self._by_name = {t.name: t for t in tensors}

    # -- access -------------------------------------------------------------------------
    def tensor(self, name: str) -> TensorInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise GGUFError(f"{self.path}: no tensor named {name!r}") from None

    def read(self, t: TensorInfo, start: int, stop: int) -> bytearray:
        """Bytes ``start:stop`` of the tensor's data, a copy read with ``pread``, not through the
        mapping: the page cache holds them, never this process's resident set, so reading a
        whole model (the forward pass reads every weight once per step) does not count the
        model in the process's memory. (Through the mapping, the kernel's fault-around maps the
        neighbouring pages too, and no ``madvise`` after the fact drops them all.)"""
        if not 0 <= start <= stop <= t.nbytes:
            raise ValueError(f"{t.name}: bytes {start}:{stop} outside its {t.nbytes}")
        out = bytearray(stop - start)
        view, done = memoryview(out), 0
        while done < len(out):
            got = os.preadv(self._fd, [view[done:]], t.data_offset + start + done)
            if got <= 0:
                raise GGUFError(f"{self.path}: ended while reading {t.name} (was the file changed?)")
            done += got
        return out


# -- the parsing steps, in file order -------------------------------------------------------
def _read_version(r: ValueReader) -> int:
    """Check the magic and return the GGUF version (2 or 3, little-endian only)."""
    if bytes(r.buf[:4]) != GGUF_MAGIC:
        raise r.fail("not a GGUF file (bad magic)")
    version = U32.unpack_from(r.buf, 4)[0]
    if version not in (2, 3):
        if version & 0xFFFF == 0 and (version >> 16) in (2, 3):
            raise r.fail("big-endian GGUF files are not supported")
        raise r.fail(f"unsupported GGUF version {version} (expected 2 or 3)")
    return version


def _read_counts(r: ValueReader) -> tuple[int, int]:
    """The tensor and metadata counts, refused when the file is too small to hold them."""
    n_tensors = r.u64(8, "tensor count")
    n_kv = r.u64(16, "metadata count")
    # A key/value takes at least 8 (key length) + 4 (type) + 1 (value) bytes,
    # a tensor info at least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 + 8.
    if n_kv > (r.size - 24) // 13:
        raise r.past_end(
            24 + 13 * n_kv,
            f"header ({n_kv} metadata keys)",
            f"claims {n_kv} metadata keys, more than the file can hold",
            at_least=True,
        )
    if n_tensors > (r.size - 24) // 32:
        raise r.past_end(
            24 + 32 * n_tensors,
            f"header ({n_tensors} tensor infos)",
            f"claims {n_tensors} tensors, more than the file can hold",
            at_least=True,
        )
    return n_tensors, n_kv


def _read_metadata(r: ValueReader, off: int, n_kv: int) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The ``n_kv`` key/values from ``off``: (values, value types, offset after them)."""
    metadata: dict[str, Any] = {}
    types: dict[str, Any] = {}
    for i in range(n_kv):
        raw, off = r.string(off, f"metadata key #{i}")
        key = r.text(raw, f"metadata key #{i}")
        if key in metadata:
            raise r.fail(f"duplicate metadata key {key!r}")
        vtype = r.u32(off, f"type of {key!r}")
        off += 4
        value, off, tinfo = r.value(vtype, off, key, 0)
        metadata[key] = value
        types[key] = tinfo
    return metadata, types, off


def _read_alignment(r: ValueReader, metadata: dict[str, Any], types: dict[str, Any]) -> int:
    """``general.alignment`` (default 32), which must be a power-of-two uint32."""
    align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(align, int)
        or isinstance(align, bool)
        or types.get("general.alignment", GGUFValueType.UINT32) != GGUFValueType.UINT32
        or align <= 0
        or align & (align - 1)
    ):
        raise r.fail(f"general.alignment must be a power-of-two uint32, got {align!r}")
    return align


def _read_tensor_infos(r: ValueReader, off: int, n_tensors: int) -> tuple[list[tuple], int]:
    """The raw tensor directory: [(name, dims, ggml type, relative offset)], offset after it."""
    buf = r.buf
    infos = []
    names: set[str] = set()
    for i in range(n_tensors):
        raw, off = r.string(off, f"tensor #{i} name")
        name = r.text(raw, f"tensor #{i} name")
        if name in names:
            raise r.fail(f"duplicate tensor name {name!r}")
        names.add(name)
        n_dims = r.u32(off, f"tensor {name!r} n_dims")
        off += 4
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise r.fail(f"tensor {name!r}: {n_dims} dimensions (1..{GGML_MAX_DIMS} allowed)")
        r.need(off, 8 * n_dims + 12, f"tensor {name!r} info")
        dims = struct.unpack_from(f"<{n_dims}Q", buf, off)
        off += 8 * n_dims
        ggml_type = U32.unpack_from(buf, off)[0]
        rel = U64.unpack_from(buf, off + 4)[0]
        off += 12
        infos.append((name, dims, ggml_type, rel))
    return infos, off


def _place_tensors(r: ValueReader, infos: list[tuple], data_start: int, align: int) -> list[TensorInfo]:
    """Check each tensor's type, shape and extent against the file; refuse overlaps."""
    size = r.size
    tensors = []
    data_end = 0
    for name, dims, ggml_type, rel in infos:
        if ggml_type not in _KNOWN_TYPES:
            raise r.fail(f"tensor {name!r}: unknown ggml type id {ggml_type}")
        block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        n = 1
        for d in dims:
            if d == 0 or d >= 1 << 62:
                raise r.fail(f"tensor {name!r}: bad dimension {d}")
            n *= d
            if n > max(size, PLAUSIBLE_END) * 256:  # a loose bound: no ggml type packs 256 elements into a byte
                raise r.fail(f"tensor {name!r}: {n} elements cannot fit in the file")
        if dims[0] % block:
            raise r.fail(
                f"tensor {name!r}: row length {dims[0]} is not a multiple of the "
                f"{GGMLQuantizationType(ggml_type).name} block size {block}"
            )
        nbytes = n // block * tsize
        if rel % align:
            raise r.fail(f"tensor {name!r}: offset {rel} is not aligned to {align}")
        start = data_start + rel
        if start + nbytes > max(size, PLAUSIBLE_END):
            raise r.fail(f"tensor {name!r}: data [{start}, {start + nbytes}) lies outside the file ({size} bytes)")
        data_end = max(data_end, start + nbytes)
        tensors.append(TensorInfo(name, tuple(dims), ggml_type, rel, start, nbytes))
    if data_end > size:  # the whole extent the tensors need: the size the file had
        last = max(tensors, key=lambda t: t.data_offset + t.nbytes)
        raise r.truncated(data_end, f"tensor data (to the end of {last.name!r})")
    by_offset = sorted(tensors, key=lambda t: (t.offset, t.nbytes))
    for a, b in zip(by_offset, by_offset[1:]):
        if a.offset + a.nbytes > b.offset:
            raise r.fail(f"tensors {a.name!r} and {b.name!r} overlap in the data section")
    return tensors
