"""Token ids and pieces against llama.cpp itself (llama-cpp-python 0.3.36, the release the
vocabulary fixture comes from), loading the very same GGUF files vocab-only."""

from __future__ import annotations

import pytest
from corpus import CORPUS
from hypothesis import assume, given, settings
from hypothesis import strategies as st

EDGE_CASES = [
    b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    b"x[PAD151700]y<tool_call>z</tool_call>",
    b"<|object_ref_start|><|fim_prefix|>a<|fim_middle|>b<|fim_suffix|><|file_sep|><|repo_name|>",
    b"<|im_start<|im_end|>|>",
    b"a</s>b",  # a NORMAL token that llama.cpp turns into a control token
    b"a\xffb\xc1\x81 \xed\xa0\x80 \xe4\xb8",  # invalid UTF-8, overlong, surrogate, truncated
    b"\x01!!\x7f\x00x",
    "'ſ e\u0301 ＡＢＣ１２３ Ⅻ ½".encode(),
    b" \t\n \r\n \xc2\xa0 \xe3\x80\x80 \x0b \x0c \xc2\x85 x",
    b"",
]


@pytest.fixture(scope="module", params=["qwen2", "qwen25"])
def pair(request, llama_reference, vocab_gguf):
    path = vocab_gguf if request.param == "qwen2" else request.getfixturevalue("qwen25_tiny")
    return request.getfixturevalue(f"{request.param}_codec"), llama_reference.model(path, vocab_only=True)


@pytest.mark.parametrize("parse_special", [False, True])
def test_corpus_and_edge_cases_match_llama_cpp(pair, parse_special):
    codec, llm = pair
    for text in CORPUS + EDGE_CASES:
        assert codec.encode(text, parse_special) == llm.tokenize(text, add_bos=False, special=parse_special), text


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FFFF), max_size=120),
    parse_special=st.booleans(),
)
def test_random_text_matches_llama_cpp(pair, text, parse_special):
    codec, llm = pair
    data = text.encode("utf-8", "surrogatepass")
    assert codec.encode(data, parse_special) == llm.tokenize(data, add_bos=False, special=parse_special)


def above_unicode(data: bytes) -> bool:
    """Whether some 4-byte UTF-8 form in ``data`` (at any offset, valid continuation bytes or
    not: a superset of what llama.cpp decodes) gives a code point above U+10FFFF. llama.cpp
    throws std::invalid_argument on those and the uncaught exception aborts the process, so
    they cannot be compared; we give U+FFFD per byte (README, docs/runtime.md)."""
    return any(
        b & 0xF8 == 0xF0
        and i + 3 < len(data) + 1
        and ((b & 7) << 18 | (data[i + 1] & 0x3F) << 12 | (data[i + 2] & 0x3F) << 6 | (data[i + 3] & 0x3F)) > 0x10FFFF
        for i, b in enumerate(data[:-3])
    )


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_match_llama_cpp(pair, data):
    codec, llm = pair
    assume(not above_unicode(data))
    assert codec.encode(data) == llm.tokenize(data, add_bos=False, special=False)


def test_code_points_above_unicode_become_replacement_characters(pair):
    codec, _llm = pair
    assert above_unicode(b"\xf4\x90\x80\x80") and not above_unicode("\U0010ffff".encode())
    for data in (b"\xf4\x90\x80\x80", b"\xf7\xbf\xbf\xbf"):
        assert codec.encode(data) == codec.encode(("\ufffd" * 4).encode())


@pytest.mark.parametrize("special", [False, True])
def test_pieces_match_llama_cpp(pair, special):
    codec, llm = pair
    ids = [0, 220, 198, 9707, 128247, *range(151640, 151670), 151935]
    for i in ids:
        assert codec.decode([i], special=special) == llm.detokenize([i], special=special), i
