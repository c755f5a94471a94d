"""Hostile Q25TOKRT images for both readers (the Python one and the C runtime's): seeded
mutations of a real image with every CRC fixed up afterwards, so the mutations reach the
structural and semantic checks instead of stopping at a checksum."""

from __future__ import annotations

import random
import struct
import zlib

from q25deploy.tokenizer.image.format import HEADER, SECTION
from q25deploy.tokenizer.image.format import HEADER_CRC_OFFSET as HEADER_CRC

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
            struct.pack_into("<I", data, ent + ENTRY_CRC, zlib.crc32(bytes(data[off : off + size])))
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


def targeted(image: bytes) -> list[tuple[str, bytes]]:
    """One hostile image per way of failing checks 7 and 12-21 of docs/runtime-image.md,
    each built from ``image`` with every CRC fixed, labelled with the check it breaks."""
    from q25deploy.tokenizer.image.reader import open_image

    img = open_image(image)
    sec = {s["name"]: s for s in img.sections}
    order = [s["name"] for s in img.sections]
    n, n_merges = img.n_tokens, len(img.merges)
    meta, ti, tb = sec["metadata"]["offset"], sec["token_index"]["offset"], sec["token_bytes"]
    mt, b2t, pi = sec["merge_table"]["offset"], sec["byte_to_token"]["offset"], sec["merge_pair_index"]["offset"]
    sp, cl = sec["special_index"]["offset"], sec["unicode_classes"]["offset"]
    used = [i for i, v in enumerate(img.pair_index.tolist()) if v]
    normal = next(i for i in range(n) if img.token_index[i]["type"] == 1)
    ent = {name: HEADER_SIZE + k * ENTRY_SIZE for k, name in enumerate(order)}

    def u32(off: int, value: int):
        return lambda d: struct.pack_into("<I", d, off, value)

    def u16(off: int, value: int):
        return lambda d: struct.pack_into("<H", d, off, value)

    def swap_entries(a: str, b: str):
        def f(d: bytearray) -> None:
            ea, eb = ent[a], ent[b]
            d[ea : ea + ENTRY_SIZE], d[eb : eb + ENTRY_SIZE] = (
                bytes(d[eb : eb + ENTRY_SIZE]),
                bytes(d[ea : ea + ENTRY_SIZE]),
            )

        return f

    def swap_specials(d: bytearray) -> None:
        d[sp : sp + 8], d[sp + 8 : sp + 16] = bytes(d[sp + 8 : sp + 16]), bytes(d[sp : sp + 8])

    def pre(text: bytes):
        return lambda d: d.__setitem__(slice(meta + 96, meta + 128), text.ljust(32, b"\0"))

    cases = [
        ("7 table order", swap_entries("token_index", "token_bytes")),
        ("13 pre-tokenizer", pre(b"llama3")),
        ("13 pre-tokenizer padding", pre(b"qwen2\0x")),
        ("14 vocab size", u32(meta, n + 1)),
        ("14 merge count", u32(meta + 4, n_merges - 1)),
        ("14 special count", u32(meta + 192, len(img.specials) + 1)),
        ("15 eos", u32(meta + 12, n)),
        ("16 byte_to_token", u32(b2t + 4 * 65, n)),
        ("17 classes start", u32(cl, 1)),
        ("17 classes order", u32(cl + 16, int(img.classes["first"][1]))),
        ("17 classes end", u32(cl + 8 * (len(img.classes) - 1), 0x110000)),
        ("18 pair slot", u32(pi + 4 * used[0], n_merges + 1)),
        ("18 pair count", u32(pi + 4 * used[0], 0)),
        (
            "18 pair capacity",
            lambda d: struct.pack_into(
                "<QI4xQ",
                d,
                ent["merge_pair_index"] + 16,
                sec["merge_pair_index"]["size"] // 2,
                4,
                sec["merge_pair_index"]["record_count"] // 2,
            ),
        ),
        ("19 token offset", u32(ti + 8 * 7, tb["size"])),
        ("19 token length", u16(ti + 8 * (n - 1) + 4, 0xFFFF)),
        ("20 merge left", u32(mt + 16 * 3, n)),
        ("20 merge out", u32(mt + 16 * 4 + 8, 0xFFFFFFFF)),
        ("20 merge rank", u32(mt + 16 * 5 + 12, 6)),
        ("21 special id", u32(sp, n)),
        ("21 special type", u16(sp + 4, 1)),
        ("21 special length", u16(sp + 6, int(img.specials["length"][0]) + 1)),
        ("21 special order", swap_specials),
        ("21 special missing", u16(ti + 8 * normal + 6, 3)),
    ]
    out = []
    for label, mutate in cases:
        data = bytearray(image)
        mutate(data)
        fix_crcs(data)
        out.append((label, bytes(data)))
    return out
