"""The strict low-level half of the GGUF reader: bounds-checked reads of scalars, strings
and (nested) arrays from the mapped file, and the lazy :class:`StringArray`.

:class:`ValueReader` checks every length and count against the file size before anything
is allocated; each failure is a :class:`~q25deploy.errors.GGUFError` naming the file.
:mod:`q25deploy.model.gguf` builds the file object and the tensor directory on top of it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from gguf import GGUFValueType

from ..errors import GGUFError

#: array nesting deeper than this is refused (GGUF writers produce depth 1)
MAX_ARRAY_DEPTH = 4
#: A structure that needs the file to reach past this (1 TiB) is a corrupt length or offset, not a
#: file cut short: no model file is that large.
PLAUSIBLE_END = 1 << 40

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")

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
            offs: list[int] = []
            append = offs.append
            unpack = U64.unpack_from
            buf = self._buf
            off = self._start
            for _ in range(self._count):
                (n,) = unpack(buf, off)
                append(off + 8)
                off += 8 + n
            self._offsets = offs
        return self._offsets

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        offs = self._index()
        o = offs[i]
        (n,) = U64.unpack_from(self._buf, o - 8)
        return bytes(self._buf[o : o + n])

    def __iter__(self) -> Iterator[bytes]:
        buf = self._buf
        unpack = U64.unpack_from
        off = self._start
        for _ in range(self._count):
            (n,) = unpack(buf, off)
            yield bytes(buf[off + 8 : off + 8 + n])
            off += 8 + n

    def to_list(self) -> list[bytes]:
        return list(self)


class ValueReader:
    """Bounds-checked reads from a mapped GGUF file of ``size`` bytes at ``path``.

    Every read takes an offset and returns what it read with the offset after it; ``what``
    and ``key`` only name the field in the error message.
    """

    def __init__(self, buf: memoryview, size: int, path: str, refetch: str | None = None) -> None:
        self.buf = buf
        self.size = size
        self.path = path
        self.refetch = refetch or "re-download it or copy it again"

    def fail(self, what: str) -> GGUFError:
        """The error for this file: ``what`` prefixed with its path."""
        return GGUFError(f"{self.path}: {what}")

    def truncated(self, end: int, part: str, *, at_least: bool = False) -> GGUFError:
        """The error for a file that ends at ``self.size`` where its ``part`` needs ``end`` bytes:
        what an interrupted download or copy leaves, and the one line says so and what to do."""
        need = f"at least {end} bytes" if at_least else f"{end} bytes"
        return GGUFError(
            f"{self.path} is truncated: it ends at byte {self.size} but its {part} needs {need} "
            f"(an interrupted download or copy? fetch it again: {self.refetch})"
        )

    def past_end(self, end: int, part: str, corrupt: str, *, at_least: bool = False) -> GGUFError:
        """A structure that runs past the end of the file: truncation when the end it needs is one
        a model file can have (under :data:`PLAUSIBLE_END`), else the ``corrupt`` field's error."""
        if end <= PLAUSIBLE_END:
            return self.truncated(end, part, at_least=at_least)
        return self.fail(corrupt)

    def need(self, off: int, n: int, what: str) -> None:
        """Refuse unless ``n`` bytes at ``off`` lie inside the file."""
        if n < 0 or off + n > self.size:
            raise self.past_end(off + n, f"header ({what})", f"{what}: {n} bytes at offset {off} lie past the end")

    def u32(self, off: int, what: str) -> int:
        """The little-endian uint32 at ``off``."""
        self.need(off, 4, what)
        return U32.unpack_from(self.buf, off)[0]

    def u64(self, off: int, what: str) -> int:
        """The little-endian uint64 at ``off``."""
        self.need(off, 8, what)
        return U64.unpack_from(self.buf, off)[0]

    def string(self, off: int, what: str) -> tuple[bytes, int]:
        """A length-prefixed GGUF string's bytes, and the offset after it."""
        n = self.u64(off, what)
        if n > self.size - off - 8:
            raise self.past_end(
                off + 8 + n, f"header ({what})", f"{what}: string length {n} runs past the end of the file"
            )
        return bytes(self.buf[off + 8 : off + 8 + n]), off + 8 + n

    def text(self, raw: bytes, what: str) -> str:
        """``raw`` decoded as UTF-8, or the file's error."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def value(self, vtype: int, off: int, key: str, depth: int) -> tuple[Any, int, Any]:
        """One metadata value of type ``vtype``: (value, offset after it, type info)."""
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is not None:
            self.need(off, fmt.size, f"value of {key!r}")
            return fmt.unpack_from(self.buf, off)[0], off + fmt.size, vtype
        if vtype == GGUFValueType.STRING:
            raw, off = self.string(off, f"value of {key!r}")
            return self.text(raw, f"value of {key!r}"), off, vtype
        if vtype == GGUFValueType.ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise self.fail(f"{key!r}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
            return self.array(off, key, depth)
        raise self.fail(f"{key!r}: unknown value type {vtype}")

    def array(self, off: int, key: str, depth: int) -> tuple[Any, int, Any]:
        """An array value (after its type tag): numbers as a numpy view, strings lazily."""
        etype = self.u32(off, f"array type of {key!r}")
        count = self.u64(off + 4, f"array length of {key!r}")
        off += 12
        remaining = self.size - off
        tinfo = (GGUFValueType.ARRAY, etype)
        if etype in _NUMPY_DTYPES:
            itemsize = np.dtype(_NUMPY_DTYPES[etype]).itemsize
            if count > remaining // itemsize:
                raise self.past_end(
                    off + count * itemsize,
                    f"header (metadata {key!r})",
                    f"{key!r}: array of {count} elements runs past the end of the file",
                )
            arr = np.frombuffer(self.buf, dtype=_NUMPY_DTYPES[etype], count=count, offset=off)
            if etype == GGUFValueType.BOOL:
                arr = arr.astype(bool)
            return arr, off + count * itemsize, tinfo
        if etype == GGUFValueType.STRING:
            if count > remaining // 8:
                raise self.past_end(
                    off + 8 * count,
                    f"header (metadata {key!r})",
                    f"{key!r}: array of {count} strings runs past the end of the file",
                    at_least=True,
                )
            end = self.skip_strings(off, count, key)
            return StringArray(self.buf, off, count, end), end, tinfo
        if etype == GGUFValueType.ARRAY:
            if count > remaining // 12:
                raise self.past_end(
                    off + 12 * count,
                    f"header (metadata {key!r})",
                    f"{key!r}: array of {count} arrays runs past the end of the file",
                    at_least=True,
                )
            items = []
            for _ in range(count):
                v, off, _t = self.value(GGUFValueType.ARRAY, off, key, depth + 1)
                items.append(v)
            return items, off, tinfo
        raise self.fail(f"{key!r}: unknown array element type {etype}")

    def skip_strings(self, off: int, count: int, key: str) -> int:
        """Walk a string array's lengths, checking each against the file size."""
        unpack = U64.unpack_from
        buf = self.buf
        size = self.size
        try:
            for _ in range(count):
                off += 8 + unpack(buf, off)[0]
                # checked per element: a bogus length must not wrap past the end
                if off > size:
                    break
        except struct.error:  # the next length itself runs past the end
            off += 8
        if off > size:
            raise self.past_end(
                off, f"header (metadata {key!r})", f"{key!r}: string array runs past the end of the file", at_least=True
            )
        return off
