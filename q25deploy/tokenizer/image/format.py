"""The Q25TOKRT runtime image: layout constants and the writer.

The byte-exact specification is docs/runtime-image.md; this module and
:mod:`q25deploy.tokenizer.image.reader` implement it. Everything is little-endian. The image is built
from a :class:`~q25deploy.tokenizer.vocab.Vocab` alone (plus the Unicode class table and the source
digest), so the same input gives a byte-identical image.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ...errors import TokenizerError, UsageError
from .. import unicode_classes
from ..vocab import NO_TOKEN, Vocab

MAGIC = b"Q25TOKRT"
VERSION_MAJOR = 1
VERSION_MINOR = 0
DEFAULT_ALIGNMENT = 4096
HEADER = struct.Struct("<8sHHIIIQII24x")  # 64 bytes
SECTION = struct.Struct("<IIQQIIQII")  # 48 bytes
HEADER_CRC_OFFSET = 36

# section types
TOKEN_INDEX = 1
TOKEN_BYTES = 2
MERGE_TABLE = 3
BYTE_TO_TOKEN = 4
MERGE_PAIR_INDEX = 5
SPECIAL_INDEX = 6
UNICODE_CLASSES = 7
METADATA = 8
SECTION_NAMES = {
    TOKEN_INDEX: "token_index",
    TOKEN_BYTES: "token_bytes",
    MERGE_TABLE: "merge_table",
    BYTE_TO_TOKEN: "byte_to_token",
    MERGE_PAIR_INDEX: "merge_pair_index",
    SPECIAL_INDEX: "special_index",
    UNICODE_CLASSES: "unicode_classes",
    METADATA: "metadata",
}
RECORD_SIZES = {
    TOKEN_INDEX: 8,
    TOKEN_BYTES: 1,
    MERGE_TABLE: 16,
    BYTE_TO_TOKEN: 4,
    MERGE_PAIR_INDEX: 4,
    SPECIAL_INDEX: 8,
    UNICODE_CLASSES: 8,
    METADATA: 256,
}

TOKEN_INDEX_DTYPE = np.dtype([("offset", "<u4"), ("length", "<u2"), ("type", "<u2")])
SPECIAL_DTYPE = np.dtype([("id", "<u4"), ("type", "<u2"), ("length", "<u2")])
CLASS_DTYPE = np.dtype([("first", "<u4"), ("flags", "<u4")])
METADATA_STRUCT = struct.Struct("<IIIIIIII32s32s32s64sI60x")  # 256 bytes
META_FLAG_ADD_BOS = 1


def pair_hash(left: int, right: int) -> int:
    """The merge-pair index hash (fixed by the spec): 32-bit multiply/xor-shift mix."""
    h = (left * 0x9E3779B1 + right * 0x85EBCA77) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def pair_index_capacity(n_merges: int) -> int:
    """Smallest power of two >= 2 * merges (load factor <= 0.5), at least 16."""
    cap = 16
    while cap < 2 * n_merges:
        cap <<= 1
    return cap


def _pair_hashes(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """:func:`pair_hash` over arrays (uint32 wrap-around arithmetic)."""
    with np.errstate(over="ignore"):
        h = left.astype(np.uint32) * np.uint32(0x9E3779B1) + right.astype(np.uint32) * np.uint32(0x85EBCA77)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x7FEB352D)
        h ^= h >> np.uint32(15)
    return h


def build_pair_index(merges: np.ndarray) -> np.ndarray:
    """Open addressing, linear probing, inserted in rank order; slot = merge index + 1."""
    cap = pair_index_capacity(len(merges))
    mask = cap - 1
    table = [0] * cap
    starts = (_pair_hashes(merges[:, 0], merges[:, 1]) & np.uint32(mask)).tolist()
    for i, s in enumerate(starts):
        while table[s]:
            s = (s + 1) & mask
        table[s] = i + 1
    return np.asarray(table, dtype="<u4")


def ps_bundle(vocab: Vocab) -> dict[str, bytes]:
    """The PS bundle files: token_index.bin, token_bytes.bin, merge_table_u32.bin."""
    lengths = np.fromiter((len(r) for r in vocab.raw), dtype=np.int64, count=vocab.n_tokens)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    if offsets[-1] + lengths[-1] > 0xFFFFFFFF:
        raise TokenizerError("token bytes exceed 4 GiB")
    index = np.empty(vocab.n_tokens, dtype=TOKEN_INDEX_DTYPE)
    index["offset"] = offsets
    index["length"] = lengths
    index["type"] = vocab.types
    return {
        "token_index.bin": index.tobytes(),
        "token_bytes.bin": b"".join(vocab.raw),
        "merge_table_u32.bin": vocab.merges.astype("<u4").tobytes(),
    }


def vocab_fingerprint(bundle: dict[str, bytes]) -> bytes:
    """sha256 over token_index.bin, token_bytes.bin and merge_table_u32.bin, in that order."""
    h = hashlib.sha256()
    for name in ("token_index.bin", "token_bytes.bin", "merge_table_u32.bin"):
        h.update(bundle[name])
    return h.digest()


def _fixed(text: str, size: int) -> bytes:
    raw = text.encode("utf-8")[:size]
    return raw.decode("utf-8", "ignore").encode("utf-8").ljust(size, b"\0")


@dataclass(frozen=True)
class ImageBuild:
    data: bytes
    fingerprint: bytes
    sections: list[dict]


def build_image(
    vocab: Vocab,
    *,
    source_sha256: bytes = b"\0" * 32,
    model_name: str = "",
    alignment: int = DEFAULT_ALIGNMENT,
    bundle: dict[str, bytes] | None = None,
) -> ImageBuild:
    """The runtime image of ``vocab``: same input, byte-identical output."""
    if alignment < 64 or alignment & (alignment - 1) or alignment > 1 << 24:
        raise UsageError(f"image alignment {alignment} must be a power of two from 64 to 16 MiB")
    bundle = bundle or ps_bundle(vocab)
    fingerprint = vocab_fingerprint(bundle)
    byte_to_token = _byte_to_token(vocab)
    specials = vocab.special_ids()
    sp = np.empty(len(specials), dtype=SPECIAL_DTYPE)
    sp["id"] = specials
    sp["type"] = vocab.types[specials] if specials else []
    sp["length"] = [len(vocab.raw[i]) for i in specials]
    uversion, ranges = unicode_classes.load()
    classes = np.array(ranges, dtype="<u4").view(CLASS_DTYPE).reshape(-1)
    meta = _metadata_record(vocab, uversion, fingerprint, source_sha256, model_name, len(specials))
    payloads = [
        (TOKEN_INDEX, bundle["token_index.bin"]),
        (TOKEN_BYTES, bundle["token_bytes.bin"]),
        (MERGE_TABLE, bundle["merge_table_u32.bin"]),
        (BYTE_TO_TOKEN, byte_to_token.tobytes()),
        (MERGE_PAIR_INDEX, build_pair_index(vocab.merges).tobytes()),
        (SPECIAL_INDEX, sp.tobytes()),
        (UNICODE_CLASSES, classes.tobytes()),
        (METADATA, meta),
    ]
    data, sections = _lay_out(payloads, alignment)
    return ImageBuild(data, fingerprint, sections)


def _byte_to_token(vocab: Vocab) -> np.ndarray:
    """The 256-entry byte → single-byte token map; every byte must have one."""
    byte_to_token = np.full(256, NO_TOKEN, dtype="<u4")
    for i in range(vocab.n_tokens):  # the single-byte NORMAL tokens; last id wins like llama.cpp
        if vocab.types[i] in (1, 6) and len(vocab.raw[i]) == 1:
            byte_to_token[vocab.raw[i][0]] = i
    missing = [b for b in range(256) if byte_to_token[b] == NO_TOKEN]
    if missing:
        raise TokenizerError(f"the vocabulary has no token for byte(s) {missing[:8]} (not a byte-level BPE)")
    return byte_to_token


def _metadata_record(
    vocab: Vocab, uversion: str, fingerprint: bytes, source_sha256: bytes, model_name: str, n_special: int
) -> bytes:
    """The 256-byte METADATA record."""
    return METADATA_STRUCT.pack(
        vocab.n_tokens,
        len(vocab.merges),
        vocab.bos,
        vocab.eos,
        vocab.pad,
        META_FLAG_ADD_BOS if vocab.add_bos else 0,
        unicode_classes.version_code(uversion),
        max(len(r) for r in vocab.raw),
        fingerprint,
        source_sha256,
        _fixed(vocab.pre, 32),
        _fixed(model_name, 64),
        n_special,
    )


def _lay_out(payloads: list[tuple[int, bytes]], alignment: int) -> tuple[bytes, list[dict]]:
    """Header, section table and aligned sections as one file; and the section descriptions."""
    header_size = HEADER.size + SECTION.size * len(payloads)
    entries = []
    chunks = []
    off = _align(header_size, alignment)
    for stype, data in payloads:
        rs = RECORD_SIZES[stype]
        entries.append((stype, 0, off, len(data), rs, 0, len(data) // rs, zlib.crc32(data), 0))
        chunks.append((off, data))
        off = _align(off + len(data), alignment)
    file_size = chunks[-1][0] + len(chunks[-1][1])
    out = bytearray(file_size)
    head = HEADER.pack(MAGIC, VERSION_MAJOR, VERSION_MINOR, header_size, len(entries), alignment, file_size, 0, 0)
    table = b"".join(SECTION.pack(*e) for e in entries)
    crc = zlib.crc32(head + table)
    out[: HEADER.size] = head
    struct.pack_into("<I", out, HEADER_CRC_OFFSET, crc)
    out[HEADER.size : header_size] = table
    for o, data in chunks:
        out[o : o + len(data)] = data
    sections = [
        {
            "type": e[0],
            "name": SECTION_NAMES[e[0]],
            "offset": e[2],
            "size": e[3],
            "record_size": e[4],
            "record_count": e[6],
            "crc32": f"{e[7]:08x}",
        }
        for e in entries
    ]
    return bytes(out), sections


def _align(n: int, a: int) -> int:
    return -(-n // a) * a
