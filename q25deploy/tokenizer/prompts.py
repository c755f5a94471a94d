"""Prompts the smoke tests encode on the board and compare with the host codec: multilingual
text, code, and the chat template with special tokens (parse_special)."""

from __future__ import annotations

from ..schema import SMOKE_IDS_FORMAT

SMOKE_PROMPTS: list[tuple[bytes, bool]] = [
    (t.encode("utf-8"), special)
    for t, special in [
        ("Hello, world! The quick brown fox jumps over the lazy dog.", False),
        ("你好，世界！今天天气很好。日本語のテキストも。", False),
        ("Привет, мир! مرحبا بالعالم नमस्ते दुनिया สวัสดีชาวโลก 👩‍💻", False),
        ("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n", False),
        ("for (int i = 0; i < 1024; ++i) { acc += w[i] * x[i]; }\r\n", False),
        (
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n",
            True,
        ),
        ('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', True),
    ]
]


def smoke_ids(codec) -> list[list[int]]:
    """``codec``'s ids of every smoke prompt: what the board's ``q25tok encode`` must give."""
    return [codec.encode(text, special) for text, special in SMOKE_PROMPTS]


def smoke_record(image_sha256: str, ids: list[list[int]]) -> dict:
    """What ``build`` writes to ``smoke_ids.json``: every smoke prompt with the host codec's ids
    for the image it built (the same ids the layer's oeqa test expects). A deploy's smoke test
    then compares the board with them and does not read the codec (Python work that would run
    in the middle of the upload and slow it)."""
    return {
        "format": SMOKE_IDS_FORMAT,
        "image_sha256": image_sha256,
        "prompts": [
            {"text": text.decode("utf-8"), "special": special, "ids": list(want)}
            for (text, special), want in zip(SMOKE_PROMPTS, ids, strict=True)
        ],
    }


def recorded_ids(record: tuple[str, list[tuple[bytes, bool, list[int]]]], image_sha256: str) -> list[list[int]] | None:
    """The recorded ids of :data:`SMOKE_PROMPTS` (``record`` as ``schema.parse_smoke_ids`` gives
    it), or None when they were recorded for another image or other prompts (an older tool)."""
    sha, cases = record
    if sha != image_sha256 or [(t, sp) for t, sp, _ in cases] != SMOKE_PROMPTS:
        return None
    return [ids for _, _, ids in cases]
