from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from q25deploy.errors import ImageError, UsageError
from q25deploy.tokenizer.image.format import (
    HEADER,
    HEADER_CRC_OFFSET,
    SECTION,
    build_image,
    pair_hash,
    pair_index_capacity,
)
from q25deploy.tokenizer.image.reader import open_image


def lookup(img, left: int, right: int) -> int | None:
    """Find a merge through the image's pair index, as the spec says a reader must."""
    mask = len(img.pair_index) - 1
    s = pair_hash(left, right) & mask
    while img.pair_index[s]:
        m = img.merges[img.pair_index[s] - 1]
        if m[0] == left and m[1] == right:
            return int(img.pair_index[s] - 1)
        s = (s + 1) & mask
    return None


def refresh_header_crc(data: bytearray) -> None:
    header_size = struct.unpack_from("<I", data, 12)[0]
    struct.pack_into("<I", data, HEADER_CRC_OFFSET, 0)
    struct.pack_into("<I", data, HEADER_CRC_OFFSET, zlib.crc32(bytes(data[:header_size])))


def test_same_input_gives_identical_bytes(qwen2_vocab, qwen2_image):
    again = build_image(qwen2_vocab)
    assert again.data == qwen2_image.data
    assert again.fingerprint == qwen2_image.fingerprint


def test_sections_are_aligned_and_described(qwen2_image):
    img = open_image(qwen2_image.data)
    assert img.version == (1, 0)
    assert {s["name"] for s in img.sections} >= {
        "token_index",
        "token_bytes",
        "merge_table",
        "byte_to_token",
        "merge_pair_index",
        "special_index",
        "unicode_classes",
        "metadata",
    }
    assert all(s["offset"] % 4096 == 0 for s in img.sections)
    assert img.meta["vocab_size"] == 151936 and img.meta["merge_count"] == 151387
    assert img.meta["pre_tokenizer"] == "qwen2" and img.meta["unicode_version"] == "15.0.0"
    assert img.meta["vocab_fingerprint"] == qwen2_image.fingerprint.hex()


def test_every_merge_is_found_through_the_pair_index(qwen2_image):
    img = open_image(qwen2_image.data)
    assert len(img.pair_index) == pair_index_capacity(len(img.merges))
    for rank in range(0, len(img.merges), 97):
        left, right = int(img.merges[rank, 0]), int(img.merges[rank, 1])
        assert lookup(img, left, right) == rank
    assert lookup(img, 151643, 151644) is None


def test_special_index_is_longest_first(qwen25_image):
    img = open_image(qwen25_image.data)
    lengths = img.specials["length"].tolist()
    assert lengths == sorted(lengths, reverse=True)
    assert 151657 in img.specials["id"].tolist()  # <tool_call>, USER_DEFINED
    assert len(img.specials) == 22 + 271 + 1  # added tokens, [PAD151665]..[PAD151935], and "</s>"
    assert 128247 in img.specials["id"].tolist()  # llama.cpp makes the NORMAL "</s>" a control token


def test_other_alignment(qwen2_vocab):
    img = open_image(build_image(qwen2_vocab, alignment=65536).data)
    assert all(s["offset"] % 65536 == 0 for s in img.sections)
    with pytest.raises(UsageError):
        build_image(qwen2_vocab, alignment=3000)


def test_bit_flip_in_a_section_is_caught_by_crc(qwen2_image):
    data = bytearray(qwen2_image.data)
    off = open_image(qwen2_image.data).sections[1]["offset"]
    data[off + 10] ^= 0x01
    open_image(bytes(data), verify_crc=False)  # structurally fine
    with pytest.raises(ImageError, match="CRC32 mismatch"):
        open_image(bytes(data))


def test_header_tampering_is_caught(qwen2_image):
    data = bytearray(qwen2_image.data)
    data[20] ^= 0x01  # alignment
    with pytest.raises(ImageError, match="checksum"):
        open_image(bytes(data))


def test_other_major_version_is_rejected(qwen2_image):
    data = bytearray(qwen2_image.data)
    struct.pack_into("<H", data, 8, 2)
    refresh_header_crc(data)
    with pytest.raises(ImageError, match="format version 2.0"):
        open_image(bytes(data))


def with_extra_section(image: bytes, stype: int, payload: bytes) -> bytes:
    """Append a section of type ``stype`` (header entry + aligned data) and fix the CRCs."""
    data = bytearray(image)
    _m, _a, _b, header_size, count, alignment, _size, _f, _c = HEADER.unpack_from(data)
    off = -(-len(data) // alignment) * alignment
    entry = SECTION.pack(stype, 0, off, len(payload), 1, 0, len(payload), zlib.crc32(payload), 0)
    data[header_size : header_size + SECTION.size] = entry  # the first section starts at 4096: room
    data.extend(b"\0" * (off - len(data)) + payload)
    struct.pack_into("<IIIQ", data, 12, header_size + SECTION.size, count + 1, alignment, len(data))
    refresh_header_crc(data)
    return bytes(data)


def test_unknown_section_types_are_skipped(qwen2_image):
    data = with_extra_section(qwen2_image.data, 0x7777, b"future data")
    img = open_image(data)
    assert img.sections[-1]["name"] == "type 30583" and img.meta["vocab_size"] == 151936


def test_missing_required_section_is_an_error(qwen2_image):
    data = bytearray(qwen2_image.data)
    n = len(open_image(qwen2_image.data).sections)
    struct.pack_into("<I", data, HEADER.size + (n - 1) * SECTION.size, 99)  # metadata -> unknown type
    refresh_header_crc(data)
    with pytest.raises(ImageError, match="required section metadata is missing"):
        open_image(bytes(data))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.__setitem__(slice(0, 8), b"NOTQ25TK"), "magic"),
        (lambda d: d.extend(b"\0" * 16), "header says"),
        (lambda d: struct.pack_into("<I", d, 16, 1000), "bad header size"),
    ],
)
def test_structural_errors(qwen2_image, mutate, message):
    data = bytearray(qwen2_image.data)
    mutate(data)
    with pytest.raises(ImageError, match=message):
        open_image(bytes(data))


def test_out_of_range_ids_are_rejected_even_with_valid_crcs(qwen2_image):
    data = bytearray(qwen2_image.data)
    img = open_image(qwen2_image.data)
    merge = next(s for s in img.sections if s["name"] == "merge_table")
    struct.pack_into("<I", data, merge["offset"] + 16 * 5 + 8, 10**7)  # out id of merge 5
    # fix the section CRC and the header CRC so only the semantic check can catch it
    k = [s["name"] for s in img.sections].index("merge_table")
    crc = zlib.crc32(bytes(data[merge["offset"] : merge["offset"] + merge["size"]]))
    struct.pack_into("<I", data, HEADER.size + k * SECTION.size + 40, crc)
    refresh_header_crc(data)
    with pytest.raises(ImageError, match="out of range"):
        open_image(bytes(data))


def test_fingerprint_is_over_the_ps_bundle(qwen2_vocab, qwen2_image):
    import hashlib

    from q25deploy.tokenizer.image.format import ps_bundle

    b = ps_bundle(qwen2_vocab)
    h = hashlib.sha256(b["token_index.bin"] + b["token_bytes.bin"] + b["merge_table_u32.bin"]).digest()
    assert h == qwen2_image.fingerprint
    idx = np.frombuffer(b["token_index.bin"], dtype=[("o", "<u4"), ("l", "<u2"), ("t", "<u2")])
    assert b["token_bytes.bin"][idx["o"][9707] : idx["o"][9707] + idx["l"][9707]] == b"Hello"
