"""Read and validate a Q25TOKRT runtime image (docs/runtime-image.md).

:func:`open_image` performs the numbered checks of docs/runtime-image.md ("Validation a
reader performs"), the same list the C runtime's ``q25_nl_tokenizer_runtime_image_open``
implements (``tests/runtime/test_c_runtime.py`` holds both to it on the same hostile images);
``verify_crc=True`` adds check 9, each section's CRC32. Sections of unknown type are skipped.
The result exposes zero-copy numpy views of the sections.
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
    pair_index_capacity,
)

MAX_SECTIONS = 64
MAX_VOCAB = 0x7FFFFFFE  # check 14: ids stay below 2^31 - 1
SPECIAL_TYPES = (2, 3, 4)  # UNKNOWN, CONTROL, USER_DEFINED: the special index lists exactly these
PRE_QWEN2 = b"qwen2".ljust(32, b"\0")  # check 13


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
    """Validate ``data`` as a Q25TOKRT image and return zero-copy views of its sections. The
    numbers in comments are the checks of docs/runtime-image.md, as in q25tok_image.c."""
    major, minor, header_size, count, alignment = _check_header(data, name)
    sections, found = _read_section_table(data, name, header_size, count, alignment, verify_crc)

    def view(stype: int, dtype) -> np.ndarray:
        off, ssize, _ = found[stype]
        return np.frombuffer(data, dtype=dtype, count=ssize // np.dtype(dtype).itemsize, offset=off)

    mo, _ms, mcount = found[METADATA]
    if mcount != 1:  # 12
        raise _fail(name, "metadata section must hold one record")
    fields = METADATA_STRUCT.unpack_from(data, mo)
    if fields[10] != PRE_QWEN2:  # 13
        raise _fail(
            name, f"pre-tokenizer field {fields[10].rstrip(bytes(1))!r} (NUL-padded), this reader supports qwen2"
        )
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
    _check_tokens_and_merges(image, fields, tb_size, name)
    _check_specials_and_classes(image, fields, name)
    return image


def _check_header(data: bytes, name: str) -> tuple[int, int, int, int, int]:
    """Checks 1-6: magic, version, size, section count, header checksum, alignment."""
    size = len(data)
    if size < HEADER.size or data[:8] != MAGIC:  # 1
        raise _fail(name, "no Q25TOKRT magic")
    _magic, major, minor, header_size, count, alignment, file_size, _flags, crc = HEADER.unpack_from(data)
    if major != VERSION_MAJOR:  # 2
        raise _fail(name, f"format version {major}.{minor}, this reader supports {VERSION_MAJOR}.x")
    if file_size != size:  # 3
        raise _fail(name, f"header says {file_size} bytes, file has {size}")
    if not 1 <= count <= MAX_SECTIONS or header_size != HEADER.size + count * SECTION.size or header_size > size:
        raise _fail(name, f"bad header size {header_size} for {count} sections")  # 4
    head = bytearray(data[:header_size])
    struct.pack_into("<I", head, HEADER_CRC_OFFSET, 0)
    if zlib.crc32(head) != crc:  # 5
        raise _fail(name, "header checksum mismatch")
    if alignment < 8 or alignment & (alignment - 1):  # 6
        raise _fail(name, f"alignment {alignment} is not a power of two >= 8")
    return major, minor, header_size, count, alignment


def _read_section_table(
    data: bytes, name: str, header_size: int, count: int, alignment: int, verify_crc: bool
) -> tuple[list[dict], dict[int, tuple[int, int, int]]]:
    """Checks 7-11: every entry in order, aligned, inside the file, consistent; known types once."""
    found: dict[int, tuple[int, int, int]] = {}
    sections = []
    prev_end = header_size
    for k in range(count):
        stype, _sf, off, ssize, rsize, _r, rcount, scrc, _r2 = SECTION.unpack_from(data, HEADER.size + k * SECTION.size)
        label = SECTION_NAMES.get(stype, f"type {stype}")
        if off % alignment or off < prev_end or off + ssize > len(data):  # 7
            raise _fail(
                name,
                f"section {label} at [{off}, {off + ssize}) is misaligned, outside the file, "
                "or not after the previous section",
            )
        prev_end = off + ssize
        if rsize == 0 or rsize * rcount != ssize:  # 8
            raise _fail(name, f"section {label}: {rcount} records of {rsize} bytes != size {ssize}")
        if verify_crc and zlib.crc32(memoryview(data)[off : off + ssize]) != scrc:  # 9
            raise _fail(name, f"section {label}: CRC32 mismatch")
        sections.append(
            {
                "type": stype,
                "name": label,
                "offset": off,
                "size": ssize,
                "record_size": rsize,
                "record_count": rcount,
                "crc32": f"{scrc:08x}",
            }
        )
        if stype not in RECORD_SIZES:  # 10: unknown section types are skipped
            continue
        if stype in found:
            raise _fail(name, f"duplicate section {label}")
        if rsize != RECORD_SIZES[stype]:
            raise _fail(name, f"section {label}: record size {rsize}, expected {RECORD_SIZES[stype]}")
        found[stype] = (off, ssize, rcount)
    for stype, label in SECTION_NAMES.items():  # 11
        if stype not in found:
            raise _fail(name, f"required section {label} is missing")
    return sections, found


def _check_tokens_and_merges(img: RuntimeImage, fields: tuple, tb_size: int, name: str) -> None:
    """Checks 14-16, 18-20: counts, token bytes, merges, byte map, pair index, bos/eos/pad."""
    vocab_size, n_merges, bos, eos, pad = fields[:5]
    index, merges, pairs, n = img.token_index, img.merges, img.pair_index, len(img.token_index)
    if vocab_size != n or not 1 <= n <= MAX_VOCAB:  # 14
        raise _fail(name, f"metadata vocab size {vocab_size} != token index records {n}")
    if n_merges != len(merges) or fields[12] != len(img.specials):  # 14
        raise _fail(name, "metadata counts disagree with the sections")
    if n and (index["offset"].astype(np.int64) + index["length"]).max() > tb_size:  # 19
        raise _fail(name, "a token's bytes lie outside the token bytes section")
    if len(merges) and (merges[:, :3].max() >= n):  # 20
        raise _fail(name, "a merge names a token id out of range")
    if len(merges) and not np.array_equal(merges[:, 3], np.arange(len(merges), dtype=np.uint32)):
        raise _fail(name, "merge ranks are not 0..n-1 in order")
    if len(img.byte_to_token) != 256 or img.byte_to_token.max() >= n:  # 16
        raise _fail(name, "byte-to-token map must hold 256 ids in range")
    cap = len(pairs)  # 18: the capacity the spec fixes (load <= 1/2), slots <= merges, merges slots used
    if cap != pair_index_capacity(len(merges)) or cap > 0x80000000 or pairs.max() > len(merges):
        raise _fail(name, "merge-pair index has a bad capacity or slot")
    if np.count_nonzero(pairs) != len(merges):
        raise _fail(name, "merge-pair index does not use exactly merge_count slots")
    for v in (bos, eos, pad):  # 15
        if v != NO_TOKEN and v >= n:
            raise _fail(name, "bos/eos/pad id out of range")


def _check_specials_and_classes(img: RuntimeImage, fields: tuple, name: str) -> None:
    """Checks 21 and 17: the special index lists exactly the tokens of types 2, 3 and 4 with
    their type and length, longest first then by id; the class table ascends from 0."""
    index, specials, classes, n = img.token_index, img.specials, img.classes, len(img.token_index)
    if np.count_nonzero(np.isin(index["type"], SPECIAL_TYPES)) != len(specials):
        raise _fail(name, "special-token index does not list every special token")
    if len(specials) and (
        specials["id"].max() >= n
        or np.any(specials["length"] != index["length"][specials["id"]])
        or np.any(specials["type"] != index["type"][specials["id"]])
        or not np.all(np.isin(specials["type"], SPECIAL_TYPES))
    ):
        raise _fail(name, "special-token index disagrees with the token index")
    order = specials["length"].astype(np.int64) * -(1 << 32) + specials["id"]
    if len(specials) > 1 and np.any(np.diff(order) <= 0):
        raise _fail(name, "special tokens are not longest first, then by id")
    if (
        len(classes) == 0
        or classes["first"][0] != 0
        or np.any(np.diff(classes["first"].astype(np.int64)) <= 0)
        or classes["first"][-1] > 0x10FFFF
    ):  # 17
        raise _fail(name, "unicode class table must ascend from code point 0")


def _metadata_dict(fields: tuple) -> dict:
    """The metadata record as the ``meta`` mapping of :class:`RuntimeImage`."""
    vocab_size, n_merges, bos, eos, pad, mflags, uver, max_len, fp, src, pre, model, n_special = fields
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
