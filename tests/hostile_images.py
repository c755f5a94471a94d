"""Hostile Q25TOKRT images for both readers (the Python one and the C runtime's): seeded
mutations of a real image with every CRC fixed up afterwards, so the mutations reach the
structural and semantic checks instead of stopping at a checksum."""

from __future__ import annotations

import random
import struct
import zlib

from q25deploy.tokenizer.image.format import HEADER, HEADER_CRC_OFFSET as HEADER_CRC, SECTION

HEADER_SIZE, ENTRY_SIZE = HEADER.size, SECTION.size
ENTRY_CRC = 40  # offset of a section's CRC32 in its table entry (docs/runtime-image.md)


def fix_crcs(data: bytearray) -> None:
    """Recompute every section CRC the table can locate, then the header CRC."""
    if len(data) < HEADER_SIZE:
        return
    header_size, count = struct.unpack_from("<II", data, 12)
    if not HEADER_SIZE <= header_size <= len(data):
        return
    for k in range(min(count, (header_size - HEADER_SIZE) // ENTRY_SIZE)):
        ent = HEADER_SIZE + k * ENTRY_SIZE
        off, size = struct.unpack_from("<QQ", data, ent + 8)
        if off + size <= len(data):
            struct.pack_into("<I", data, ent + ENTRY_CRC, zlib.crc32(bytes(data[off:off + size])))
    struct.pack_into("<I", data, HEADER_CRC, 0)
    struct.pack_into("<I", data, HEADER_CRC, zlib.crc32(bytes(data[:header_size])))


def mutations(image: bytes, seed: int, n: int) -> list[bytes]:
    """``n`` mutated copies: header and section-table fields (most checks live there), a few
    section bodies, integers set to edge values; all CRCs fixed."""
    rnd = random.Random(seed)
    header_size = struct.unpack_from("<I", image, 12)[0]
    edges = [0, 1, 2, 7, 8, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
    out = []
    for _ in range(n):
        data = bytearray(image)
        for _ in range(rnd.choice((1, 1, 2, 3))):
            if rnd.random() < 0.8:
                pos = rnd.randrange(8, header_size - 3) & ~3  # an aligned field of the header or table
                struct.pack_into("<I", data, pos, rnd.choice(edges + [rnd.getrandbits(32)]))
            else:
                pos = rnd.randrange(header_size, len(data))
                data[pos] = rnd.getrandbits(8)
        fix_crcs(data)
        out.append(bytes(data))
    return out
