"""A fast, strict reader of GGUF v2/v3 metadata and tensor infos.

The file is memory-mapped; tensor data is never read here. String arrays (a tokenizer's
~300k strings) are kept as lazy :class:`StringArray` views whose elements are only sliced
out when asked for, which is what makes opening a vocabulary GGUF take milliseconds where
``gguf.GGUFReader`` builds one numpy array per string.

Every count, length and offset is checked against the file size before anything is
allocated, so a hostile file fails at once with a :class:`~q25deploy.errors.GGUFError`.
Layout facts (magic, value types, quant block sizes) come from the ``gguf`` package.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from ..errors import GGUFError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
#: array nesting deeper than this is refused (GGUF writers produce depth 1)
MAX_ARRAY_DEPTH = 4

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

_SCALAR_FORMATS: dict[int, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"),
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"),
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
_NUMPY_DTYPES: dict[int, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}
_KNOWN_TYPES = {int(t) for t in GGMLQuantizationType}


class StringArray(Sequence[bytes]):
    """A GGUF string array, read lazily from the mapped file.

    The element offsets are computed on first indexed access; ``len()`` and ``nbytes`` are
    free. Elements are ``bytes`` (GGUF does not promise UTF-8 for token texts).
    """

    def __init__(self, buf: memoryview, start: int, count: int, end: int) -> None:
        self._buf = buf
        self._start = start
        self._count = count
        self.end = end
        self._offsets: list[int] | None = None

    def __len__(self) -> int:
        return self._count

    def _index(self) -> list[int]:
        if self._offsets is None:
            offs = []
            append = offs.append
            unpack = _U64.unpack_from
            buf = self._buf
            off = self._start
            for _ in range(self._count):
                (n,) = unpack(buf, off)
                append(off + 8)
                off += 8 + n
            self._offsets = offs
        return self._offsets

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        offs = self._index()
        o = offs[i]
        (n,) = _U64.unpack_from(self._buf, o - 8)
        return bytes(self._buf[o : o + n])

    def __iter__(self) -> Iterator[bytes]:
        buf = self._buf
        unpack = _U64.unpack_from
        off = self._start
        for _ in range(self._count):
            (n,) = unpack(buf, off)
            yield bytes(buf[off + 8 : off + 8 + n])
            off += 8 + n

    def to_list(self) -> list[bytes]:
        return list(self)


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

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
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
                raise GGUFError(f"{self.path}: not a GGUF file ({self.size} bytes, too short)")
            self._mmap = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
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
    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the mapping. Views (numpy arrays, string arrays) must not outlive it."""
        buf = getattr(self, "_buf", None)
        if buf is not None:
            self._buf = None  # type: ignore[assignment]
            self.metadata = {}
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
    def _fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what}")

    def _need(self, off: int, n: int, what: str) -> None:
        if n < 0 or off + n > self.size:
            raise self._fail(f"truncated: {what} needs {n} bytes at offset {off}, file has {self.size}")

    def _u32(self, off: int, what: str) -> int:
        self._need(off, 4, what)
        return _U32.unpack_from(self._buf, off)[0]

    def _u64(self, off: int, what: str) -> int:
        self._need(off, 8, what)
        return _U64.unpack_from(self._buf, off)[0]

    def _str(self, off: int, what: str) -> tuple[bytes, int]:
        n = self._u64(off, what)
        if n > self.size - off - 8:
            raise self._fail(f"{what}: string length {n} runs past the end of the file")
        return bytes(self._buf[off + 8 : off + 8 + n]), off + 8 + n

    def _text(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"{what} is not valid UTF-8") from None

    def _parse(self) -> None:
        buf = self._buf
        if bytes(buf[:4]) != GGUF_MAGIC:
            raise self._fail("not a GGUF file (bad magic)")
        version = _U32.unpack_from(buf, 4)[0]
        if version not in (2, 3):
            if version & 0xFFFF == 0 and (version >> 16) in (2, 3):
                raise self._fail("big-endian GGUF files are not supported")
            raise self._fail(f"unsupported GGUF version {version} (expected 2 or 3)")
        self.version = version
        n_tensors = self._u64(8, "tensor count")
        n_kv = self._u64(16, "metadata count")
        off = 24
        # A key/value takes at least 8 (key length) + 4 (type) + 1 (value) bytes,
        # a tensor info at least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 + 8.
        if n_kv > (self.size - off) // 13:
            raise self._fail(f"claims {n_kv} metadata keys, more than the file can hold")
        if n_tensors > (self.size - off) // 32:
            raise self._fail(f"claims {n_tensors} tensors, more than the file can hold")

        metadata: dict[str, Any] = {}
        types: dict[str, Any] = {}
        for i in range(n_kv):
            raw, off = self._str(off, f"metadata key #{i}")
            key = self._text(raw, f"metadata key #{i}")
            if key in metadata:
                raise self._fail(f"duplicate metadata key {key!r}")
            vtype = self._u32(off, f"type of {key!r}")
            off += 4
            value, off, tinfo = self._value(vtype, off, key, 0)
            metadata[key] = value
            types[key] = tinfo
        self.metadata = metadata
        self.value_types = types

        align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            not isinstance(align, int)
            or isinstance(align, bool)
            or types.get("general.alignment", GGUFValueType.UINT32) != GGUFValueType.UINT32
            or align <= 0
            or align & (align - 1)
        ):
            raise self._fail(f"general.alignment must be a power-of-two uint32, got {align!r}")
        self.alignment = align

        infos = []
        names: set[str] = set()
        for i in range(n_tensors):
            raw, off = self._str(off, f"tensor #{i} name")
            name = self._text(raw, f"tensor #{i} name")
            if name in names:
                raise self._fail(f"duplicate tensor name {name!r}")
            names.add(name)
            n_dims = self._u32(off, f"tensor {name!r} n_dims")
            off += 4
            if not 1 <= n_dims <= GGML_MAX_DIMS:
                raise self._fail(f"tensor {name!r}: {n_dims} dimensions (1..{GGML_MAX_DIMS} allowed)")
            self._need(off, 8 * n_dims + 12, f"tensor {name!r} info")
            dims = struct.unpack_from(f"<{n_dims}Q", buf, off)
            off += 8 * n_dims
            ggml_type = _U32.unpack_from(buf, off)[0]
            rel = _U64.unpack_from(buf, off + 4)[0]
            off += 12
            infos.append((name, dims, ggml_type, rel))

        self.data_start = -(-off // align) * align
        tensors = []
        for name, dims, ggml_type, rel in infos:
            if ggml_type not in _KNOWN_TYPES:
                raise self._fail(f"tensor {name!r}: unknown ggml type id {ggml_type}")
            block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            n = 1
            for d in dims:
                if d == 0 or d >= 1 << 62:
                    raise self._fail(f"tensor {name!r}: bad dimension {d}")
                n *= d
                if n > self.size * 256:  # a loose bound: no ggml type packs 256 elements into a byte
                    raise self._fail(f"tensor {name!r}: {n} elements cannot fit in the file")
            if dims[0] % block:
                raise self._fail(
                    f"tensor {name!r}: row length {dims[0]} is not a multiple of the "
                    f"{GGMLQuantizationType(ggml_type).name} block size {block}"
                )
            nbytes = n // block * tsize
            if rel % align:
                raise self._fail(f"tensor {name!r}: offset {rel} is not aligned to {align}")
            start = self.data_start + rel
            if start + nbytes > self.size:
                raise self._fail(
                    f"tensor {name!r}: data [{start}, {start + nbytes}) lies outside the file "
                    f"({self.size} bytes)"
                )
            tensors.append(TensorInfo(name, tuple(dims), ggml_type, rel, start, nbytes))

        by_offset = sorted(tensors, key=lambda t: (t.offset, t.nbytes))
        for a, b in zip(by_offset, by_offset[1:]):
            if a.offset + a.nbytes > b.offset:
                raise self._fail(f"tensors {a.name!r} and {b.name!r} overlap in the data section")
        if tensors and self.data_start > self.size:
            raise self._fail("data section starts past the end of the file")
        self.tensors = tensors
        self._by_name = {t.name: t for t in tensors}

    def _value(self, vtype: int, off: int, key: str, depth: int) -> tuple[Any, int, Any]:
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is not None:
            self._need(off, fmt.size, f"value of {key!r}")
            return fmt.unpack_from(self._buf, off)[0], off + fmt.size, vtype
        if vtype == GGUFValueType.STRING:
            raw, off = self._str(off, f"value of {key!r}")
            return self._text(raw, f"value of {key!r}"), off, vtype
        if vtype == GGUFValueType.ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise self._fail(f"{key!r}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
            etype = self._u32(off, f"array type of {key!r}")
            count = self._u64(off + 4, f"array length of {key!r}")
            off += 12
            remaining = self.size - off
            if etype in _NUMPY_DTYPES:
                itemsize = np.dtype(_NUMPY_DTYPES[etype]).itemsize
                if count > remaining // itemsize:
                    raise self._fail(f"{key!r}: array of {count} elements runs past the end of the file")
                arr = np.frombuffer(self._buf, dtype=_NUMPY_DTYPES[etype], count=count, offset=off)
                if etype == GGUFValueType.BOOL:
                    arr = arr.astype(bool)
                return arr, off + count * itemsize, (GGUFValueType.ARRAY, etype)
            if etype == GGUFValueType.STRING:
                if count > remaining // 8:
                    raise self._fail(f"{key!r}: array of {count} strings runs past the end of the file")
                end = self._skip_strings(off, count, key)
                return StringArray(self._buf, off, count, end), end, (GGUFValueType.ARRAY, etype)
            if etype == GGUFValueType.ARRAY:
                if count > remaining // 12:
                    raise self._fail(f"{key!r}: array of {count} arrays runs past the end of the file")
                items = []
                for _ in range(count):
                    v, off, _t = self._value(GGUFValueType.ARRAY, off, key, depth + 1)
                    items.append(v)
                return items, off, (GGUFValueType.ARRAY, etype)
            raise self._fail(f"{key!r}: unknown array element type {etype}")
        raise self._fail(f"{key!r}: unknown value type {vtype}")

    def _skip_strings(self, off: int, count: int, key: str) -> int:
        """Walk a string array's lengths, checking each against the file size."""
        unpack = _U64.unpack_from
        buf = self._buf
        size = self.size
        try:
            for _ in range(count):
                off += 8 + unpack(buf, off)[0]
                # checked per element: a bogus length must not wrap past the end
                if off > size:
                    break
        except struct.error:
            off = size + 1
        if off > size:
            raise self._fail(f"{key!r}: string array runs past the end of the file")
        return off

    # -- access -------------------------------------------------------------------------
    def tensor(self, name: str) -> TensorInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise GGUFError(f"{self.path}: no tensor named {name!r}") from None

    def tensor_data(self, t: TensorInfo) -> memoryview:
        """The tensor's bytes as a zero-copy view of the mapping."""
        return self._buf[t.data_offset : t.data_offset + t.nbytes]
