"""Read and validate a Q25TOKRT runtime image (docs/runtime-image.md).

:func:`open_image` checks magic, major version, header checksum, every section's bounds,
alignment, record size and count, and that every id and offset a reader will follow is in
range; ``verify_crc=True`` also checks each section's CRC32. Sections of unknown type are
skipped. The result exposes zero-copy numpy views of the sections.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ...errors import ImageError
from ..vocab import NO_TOKEN
from .format import (
    BYTE_TO_TOKEN,
    CLASS_DTYPE,
    HEADER,
    HEADER_CRC_OFFSET,
    MAGIC,
    MERGE_PAIR_INDEX,
    MERGE_TABLE,
    META_FLAG_ADD_BOS,
    METADATA,
    METADATA_STRUCT,
    RECORD_SIZES,
    SECTION,
    SECTION_NAMES,
    SPECIAL_DTYPE,
    SPECIAL_INDEX,
    TOKEN_BYTES,
    TOKEN_INDEX,
    TOKEN_INDEX_DTYPE,
    UNICODE_CLASSES,
    VERSION_MAJOR,
)

MAX_SECTIONS = 64


@dataclass
class RuntimeImage:
    version: tuple[int, int]
    alignment: int
    size: int
    sections: list[dict]
    token_index: np.ndarray
    token_bytes: memoryview
    merges: np.ndarray  # (n, 4) uint32
    byte_to_token: np.ndarray
    pair_index: np.ndarray
    specials: np.ndarray
    classes: np.ndarray
    meta: dict

    @property
    def n_tokens(self) -> int:
        return len(self.token_index)

    def token_raw(self, i: int) -> bytes:
        rec = self.token_index[i]
        o = int(rec["offset"])
        return bytes(self.token_bytes[o : o + int(rec["length"])])


def _fail(name: str, what: str) -> ImageError:
    return ImageError(f"{name}: bad runtime image: {what}")


def read_image_file(path: str | os.PathLike[str], verify_crc: bool = True) -> RuntimeImage:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ImageError(f"{os.fspath(path)}: cannot read image: {e.strerror}") from None
    return open_image(data, name=os.fspath(path), verify_crc=verify_crc)


def open_image(data: bytes, *, name: str = "image", verify_crc: bool = True) -> RuntimeImage:
    """Validate ``data`` as a Q25TOKRT image and return zero-copy views of its sections."""
    major, minor, header_size, count, alignment = _check_header(data, name)
    sections, found = _read_section_table(data, name, header_size, count, alignment, verify_crc)

    def view(stype: int, dtype) -> np.ndarray:
        off, ssize, _ = found[stype]
        return np.frombuffer(data, dtype=dtype, count=ssize // np.dtype(dtype).itemsize, offset=off)

    mo, _ms, mcount = found[METADATA]
    if mcount != 1:
        raise _fail(name, "metadata section must hold one record")
    fields = METADATA_STRUCT.unpack_from(data, mo)
    tb_off, tb_size, _ = found[TOKEN_BYTES]
    image = RuntimeImage(
        version=(major, minor),
        alignment=alignment,
        size=len(data),
        sections=sections,
        token_index=view(TOKEN_INDEX, TOKEN_INDEX_DTYPE),
        token_bytes=memoryview(data)[tb_off : tb_off + tb_size],
        merges=view(MERGE_TABLE, "<u4").reshape(-1, 4),
        byte_to_token=view(BYTE_TO_TOKEN, "<u4"),
        pair_index=view(MERGE_PAIR_INDEX, "<u4"),
        specials=view(SPECIAL_INDEX, SPECIAL_DTYPE),
        classes=view(UNICODE_CLASSES, CLASS_DTYPE),
        meta=_metadata_dict(fields),
    )
    _check_tables(image, fields, tb_size, name)
    return image


def _check_header(data: bytes, name: str) -> tuple[int, int, int, int, int]:
    """Magic, version, size, section count, header checksum and alignment of the header."""
    size = len(data)
    if size < HEADER.size or data[:8] != MAGIC:
        raise _fail(name, "no Q25TOKRT magic")
    magic, major, minor, header_size, count, alignment, file_size, _flags, crc = HEADER.unpack_from(data)
    if major != VERSION_MAJOR:
        raise _fail(name, f"format version {major}.{minor}, this reader supports {VERSION_MAJOR}.x")
    if file_size != size:
        raise _fail(name, f"header says {file_size} bytes, file has {size}")
    if not 1 <= count <= MAX_SECTIONS or header_size != HEADER.size + count * SECTION.size or header_size > size:
        raise _fail(name, f"bad header size {header_size} for {count} sections")
    head = bytearray(data[:header_size])
    struct.pack_into("<I", head, HEADER_CRC_OFFSET, 0)
    if zlib.crc32(head) != crc:
        raise _fail(name, "header checksum mismatch")
    if alignment < 8 or alignment & (alignment - 1):
        raise _fail(name, f"alignment {alignment} is not a power of two >= 8")
    return major, minor, header_size, count, alignment


def _read_section_table(
    data: bytes, name: str, header_size: int, count: int, alignment: int, verify_crc: bool
) -> tuple[list[dict], dict[int, tuple[int, int, int]]]:
    """Every section's entry, checked; and the known ones by type: (offset, size, records)."""
    size = len(data)
    found: dict[int, tuple[int, int, int]] = {}
    sections = []
    for k in range(count):
        stype, _sf, off, ssize, rsize, _r, rcount, scrc, _r2 = SECTION.unpack_from(data, HEADER.size + k * SECTION.size)
        label = SECTION_NAMES.get(stype, f"type {stype}")
        if off % alignment or off < header_size or off + ssize > size:
            raise _fail(name, f"section {label} at [{off}, {off + ssize}) is misaligned or outside the file")
        if rsize == 0 or rsize * rcount != ssize:
            raise _fail(name, f"section {label}: {rcount} records of {rsize} bytes != size {ssize}")
        if verify_crc and zlib.crc32(memoryview(data)[off : off + ssize]) != scrc:
            raise _fail(name, f"section {label}: CRC32 mismatch")
        sections.append({"type": stype, "name": label, "offset": off, "size": ssize,
                         "record_size": rsize, "record_count": rcount, "crc32": f"{scrc:08x}"})
        if stype not in RECORD_SIZES:
            continue  # unknown section types are skipped
        if stype in found:
            raise _fail(name, f"duplicate section {label}")
        if rsize != RECORD_SIZES[stype]:
            raise _fail(name, f"section {label}: record size {rsize}, expected {RECORD_SIZES[stype]}")
        found[stype] = (off, ssize, rcount)
    spans = sorted((o, o + s) for o, s, _ in found.values())
    for (a0, a1), (b0, _b1) in zip(spans, spans[1:]):
        if a1 > b0:
            raise _fail(name, "sections overlap")
    for stype, label in SECTION_NAMES.items():
        if stype not in found:
            raise _fail(name, f"required section {label} is missing")
    return sections, found


def _check_tables(img: RuntimeImage, fields: tuple, tb_size: int, name: str) -> None:
    """Check that every id and offset a reader will follow is in range, and the counts agree."""
    vocab_size, n_merges, bos, eos, pad = fields[:5]
    n_special = fields[12]
    index, merges, b2t, pairs = img.token_index, img.merges, img.byte_to_token, img.pair_index
    specials, classes = img.specials, img.classes
    n = len(index)
    if vocab_size != n or n == 0:
        raise _fail(name, f"metadata vocab size {vocab_size} != token index records {n}")
    if n_merges != len(merges) or n_special != len(specials):
        raise _fail(name, "metadata counts disagree with the sections")
    ends = index["offset"].astype(np.int64) + index["length"]
    if n and ends.max() > tb_size:
        raise _fail(name, "a token's bytes lie outside the token bytes section")
    if len(merges) and (merges[:, :3].max() >= n):
        raise _fail(name, "a merge names a token id out of range")
    if len(merges) and not np.array_equal(merges[:, 3], np.arange(len(merges), dtype=np.uint32)):
        raise _fail(name, "merge ranks are not 0..n-1 in order")
    if len(b2t) != 256 or b2t.max() >= n:
        raise _fail(name, "byte-to-token map must hold 256 ids in range")
    cap = len(pairs)
    if cap < 16 or cap & (cap - 1) or cap < len(merges) or (len(pairs) and pairs.max() > len(merges)):
        raise _fail(name, "merge-pair index has a bad capacity or slot")
    if np.count_nonzero(pairs) != len(merges):
        raise _fail(name, "merge-pair index does not hold every merge exactly once")
    if len(specials) and (specials["id"].max() >= n or np.any(specials["length"] != index["length"][specials["id"]])):
        raise _fail(name, "special-token index disagrees with the token index")
    if len(specials) > 1 and np.any(np.diff(specials["length"].astype(np.int64)) > 0):
        raise _fail(name, "special tokens are not longest first")
    if len(classes) == 0 or classes["first"][0] != 0 or np.any(np.diff(classes["first"].astype(np.int64)) <= 0) \
            or classes["first"][-1] > 0x10FFFF:
        raise _fail(name, "unicode class table must ascend from code point 0")
    for v in (bos, eos, pad):
        if v != NO_TOKEN and v >= n:
            raise _fail(name, "bos/eos/pad id out of range")


def _metadata_dict(fields: tuple) -> dict:
    """The metadata record as the ``meta`` dict of :class:`RuntimeImage`."""
    (vocab_size, n_merges, bos, eos, pad, mflags, uver, max_len, fp, src, pre, model, n_special) = fields
    return {
        "vocab_size": vocab_size,
        "merge_count": n_merges,
        "bos": None if bos == NO_TOKEN else bos,
        "eos": None if eos == NO_TOKEN else eos,
        "pad": None if pad == NO_TOKEN else pad,
        "add_bos": bool(mflags & META_FLAG_ADD_BOS),
        "unicode_version": f"{uver >> 16}.{(uver >> 8) & 0xFF}.{uver & 0xFF}",
        "max_token_bytes": max_len,
        "vocab_fingerprint": fp.hex(),
        "source_sha256": src.hex(),
        "pre_tokenizer": pre.rstrip(b"\0").decode("utf-8", "replace"),
        "model_name": model.rstrip(b"\0").decode("utf-8", "replace"),
        "special_count": n_special,
    }
