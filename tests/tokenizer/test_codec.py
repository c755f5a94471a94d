from __future__ import annotations

import pytest
import tiktoken
from corpus import CORPUS
from hypothesis import given, settings
from hypothesis import strategies as st

from q25deploy.errors import CodecError

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def tiktoken_for(codec) -> tiktoken.Encoding:
    """tiktoken built from the same vocabulary: normal tokens with rank = id, Qwen2 pattern."""
    ranks = {codec.raw_piece(i): i for i, t in enumerate(codec.types) if t == 1}
    return tiktoken.Encoding("qwen2-test", pat_str=QWEN2_PATTERN, mergeable_ranks=ranks, special_tokens={})


@pytest.fixture(scope="module", params=["qwen2_codec", "qwen25_codec"])
def codec(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def tik(codec):
    return tiktoken_for(codec)


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_ids_equal_tiktoken_on_special_free_text(codec, tik, text):
    ids = codec.encode(text)
    assert ids == tik.encode_ordinary(text.decode("utf-8"))
    assert codec.encode(text, parse_special=True) == ids  # no special token text in the corpus
    assert codec.decode(ids) == text


def test_whole_corpus_in_one_piece(codec, tik):
    blob = b"\n".join(CORPUS) * 3
    assert codec.encode(blob) == tik.encode_ordinary(blob.decode())


# hand-checked: ids read off the vocabulary (tokens.jsonl) for each piece
def test_control_tokens_only_with_parse_special(qwen2_codec):
    text = b"<|im_start|>user\nHi<|im_end|>"
    assert qwen2_codec.encode(text, parse_special=True) == [151644, 872, 198, 13048, 151645]
    plain = qwen2_codec.encode(text)
    assert 151644 not in plain and 151645 not in plain
    assert plain[:4] == [27, 91, 318, 4906]  # "<", "|", "im", "_start"
    assert qwen2_codec.decode(plain) == text


def test_user_defined_tokens_always_match(qwen2_codec, qwen25_codec):
    assert qwen2_codec.encode(b"[PAD151650]") == [151650]
    assert qwen2_codec.encode(b"x[PAD151700]y") == [87, 151700, 88]
    assert qwen25_codec.encode(b"<tool_call>") == [151657]
    assert qwen25_codec.encode(b"a<tool_call>b</tool_call>") == [64, 151657, 65, 151658]
    # <|fim_prefix|> is USER_DEFINED in the GGUF, but llama.cpp treats FIM names as control
    assert qwen25_codec.encode(b"a<|fim_prefix|>b", parse_special=True) == [64, 151659, 65]
    assert 151659 not in qwen25_codec.encode(b"a<|fim_prefix|>b")
    assert qwen25_codec.decode([151659]) == b"" and qwen25_codec.decode([151659], special=True) == b"<|fim_prefix|>"
    # in Qwen2.5 <|object_ref_start|> is CONTROL: text unless parse_special
    assert qwen25_codec.encode(b"<|object_ref_start|>", parse_special=True) == [151646]
    assert 151646 not in qwen25_codec.encode(b"<|object_ref_start|>")


def test_special_tokens_back_to_back_and_inside_words(qwen25_codec):
    ids = qwen25_codec.encode(b"<|im_start|><|im_start|>x<|im_end|>y", parse_special=True)
    assert ids == [151644, 151644, 87, 151645, 88]
    assert qwen25_codec.encode(b"<|im_start<|im_end|>|>", parse_special=True)[-3:] == [151645, 91, 29]


def test_chat_template_prompt(qwen25_codec):
    prompt = "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"
    ids = qwen25_codec.encode(prompt.encode(), parse_special=True)
    assert ids.count(151644) == 3 and ids.count(151645) == 2
    assert qwen25_codec.decode(ids, special=True) == prompt.encode()
    assert b"<|im_start|>" not in qwen25_codec.decode(ids)


def test_invalid_utf8_is_replaced_like_llama_cpp(qwen2_codec):
    assert qwen2_codec.encode(b"a\xffb") == qwen2_codec.encode("a\ufffdb".encode())
    assert qwen2_codec.encode(b"\xc1\x81") == qwen2_codec.encode(b"A")


def test_decode_rejects_out_of_range_ids(qwen2_codec):
    with pytest.raises(CodecError, match="out of range"):
        qwen2_codec.decode([151936])
    with pytest.raises(CodecError):
        qwen2_codec.decode([-1])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_decode_encode_round_trips(qwen25_codec, text):
    data = text.encode("utf-8")
    assert qwen25_codec.decode(qwen25_codec.encode(data)) == data
    assert qwen25_codec.decode(qwen25_codec.encode(data, parse_special=True), special=True) == data


def test_long_pieces_merge_through_the_heap_exactly_as_the_rescan_does(qwen25_codec, monkeypatch):
    """Pieces longer than _LONG_PIECE merge in O(n log n); the order of merges (lowest rank,
    leftmost on a tie) and so the ids must equal the quadratic rescan's."""
    import random

    from q25deploy.tokenizer import codec as codec_module

    rnd = random.Random(7)
    alphabets = [b"ab", b"abc ", bytes(range(97, 123)), bytes(range(256)), "héllo wörld 你好 ".encode()]
    pieces = [b"a" * 3000, b"ab" * 1500] + [
        bytes(rnd.choice(alpha) for _ in range(rnd.randint(2, 600))) for alpha in alphabets for _ in range(40)
    ]
    b2t = qwen25_codec.byte_to_token
    monkeypatch.setattr(codec_module, "_LONG_PIECE", 1 << 30)  # the rescan, for the reference ids
    for piece in pieces:
        qwen25_codec._cache.pop(piece, None)
        want = qwen25_codec.bpe(piece)
        assert codec_module.bpe_heap([b2t[b] for b in piece], qwen25_codec.ranks) == want
    assert len(codec_module.bpe_heap([b2t[b] for b in b"a" * 16000], qwen25_codec.ranks)) == 2000  # 8 a each
