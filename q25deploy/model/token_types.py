"""GGUF's token types (``tokenizer.ggml.token_type``: llama.cpp's ``llama_token_type``), named:
what the model's metadata says of each token, read by ``inspect`` and the tokenizer."""

from __future__ import annotations

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {0: "UNDEFINED", 1: "NORMAL", 2: "UNKNOWN", 3: "CONTROL", 4: "USER_DEFINED", 5: "UNUSED", 6: "BYTE"}
