"""Prompts the smoke tests encode on the board and compare with the host codec: multilingual
text, code, and the chat template with special tokens (parse_special)."""

from __future__ import annotations

SMOKE_PROMPTS: list[tuple[bytes, bool]] = [(t.encode("utf-8"), special) for t, special in [
    ("Hello, world! The quick brown fox jumps over the lazy dog.", False),
    ("你好，世界！今天天气很好。日本語のテキストも。", False),
    ("Привет, мир! مرحبا بالعالم नमस्ते दुनिया สวัสดีชาวโลก 👩‍💻", False),
    ("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n", False),
    ("for (int i = 0; i < 1024; ++i) { acc += w[i] * x[i]; }\r\n", False),
    ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n", True),
    ("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", True),
]]
