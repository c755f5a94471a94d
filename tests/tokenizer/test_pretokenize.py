from __future__ import annotations

import pytest

from q25deploy.tokenizer import unicode_classes
from q25deploy.tokenizer.pretokenize import (
    ClassTable,
    decode_lenient,
    encode_cpts,
    split_qwen2,
)

TABLE = ClassTable(unicode_classes.load()[1])


def pieces(text: str) -> list[str]:
    cpts = [ord(c) for c in text]
    return ["".join(text[a:b]) for a, b in split_qwen2(cpts, TABLE.flags_of(cpts))]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Hello world", ["Hello", " world"]),
        ("333", ["3", "3", "3"]),  # \p{N}: digits are not grouped
        ("x 12", ["x", " ", "1", "2"]),
        ("don't", ["don", "'t"]),
        ("DON'T WE'RE", ["DON", "'T", " WE", "'RE"]),
        ("'ſ", ["'ſ"]),  # no Unicode case folding: U+017F is not the 's contraction
        ("e\u0301", ["e", "\u0301"]),  # no NFC normalization, a combining mark is not \p{L}
        ("  \tword", ["  ", "\tword"]),  # \s+(?!\S) leaves the last blank to the word
        ("a\r\n\r\nb", ["a", "\r\n\r\n", "b"]),
        ("x  \n  y", ["x", "  \n", " ", " y"]),
        ("end   ", ["end", "   "]),
        ("!!!\n\nx", ["!!!\n\n", "x"]),  # punctuation takes trailing newlines
        (" ...", [" ..."]),
        ("a\u00a0b", ["a", "\u00a0b"]),
        ("中文，测试", ["中文", "，测试"]),  # a punctuation mark leads a letter run
        ("中文，。测试", ["中文", "，。", "测试"]),
        ("\x01!!", ["\x01!!"]),  # C0 controls are neither letters nor whitespace
    ],
)
def test_split_follows_llama_cpp_qwen2_rules(text, expected):
    assert pieces(text) == expected


def test_splits_cover_the_text_exactly():
    text = "Mixed 中文 and 123 with  spaces\r\n\tand 'll tabs"
    assert "".join(pieces(text)) == text


@pytest.mark.parametrize(
    "data, cpts",
    [
        (b"abc", [0x61, 0x62, 0x63]),
        (b"\xc3\xa9", [0xE9]),
        (b"\xff", [0xFFFD]),
        (b"a\x80b", [0x61, 0xFFFD, 0x62]),  # stray continuation byte
        (b"\xe4\xb8", [0xFFFD, 0xFFFD]),  # truncated 3-byte form: one U+FFFD per byte
        (b"\xc1\x81", [0x41]),  # overlong forms decode (llama.cpp does not check)
        (b"\xed\xa0\x80", [0xD800]),  # so do surrogates
        (b"\xf7\xbf\xbf\xbf", [0xFFFD] * 4),  # above U+10FFFF: llama.cpp throws, we replace
    ],
)
def test_lenient_decoding_matches_llama_cpp(data, cpts):
    assert decode_lenient(data) == cpts


def test_encode_cpts_keeps_surrogates():
    assert encode_cpts([0xD800, 0x41]) == b"\xed\xa0\x80A"
