"""Hand-assembled GGUF bytes for hostile-input tests (every field under the test's control)."""

from __future__ import annotations

import struct

STRING, ARRAY, UINT32, UINT64, FLOAT32 = 8, 9, 4, 10, 6


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, v: int) -> bytes:
    return s(key) + struct.pack("<II", UINT32, v)


def kv_str(key: str, v: str) -> bytes:
    return s(key) + struct.pack("<I", STRING) + s(v)


def kv_str_array(key: str, items: list[bytes]) -> bytes:
    return s(key) + struct.pack("<IIQ", ARRAY, STRING, len(items)) + b"".join(s(i) for i in items)


def tensor_info(name: str, dims: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return (
        s(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def gguf(
    kvs: list[bytes],
    tensors: list[bytes],
    data: bytes = b"",
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    alignment: int = 32,
) -> bytes:
    head = b"GGUF" + struct.pack(
        "<IQQ", version, len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    body = head + b"".join(kvs) + b"".join(tensors)
    pad = (-len(body)) % alignment
    return body + b"\0" * pad + data


def small_valid() -> bytes:
    """A valid GGUF with a string, a string array, and two F32 tensors."""
    kvs = [
        kv_str("general.architecture", "qwen2"),
        kv_str_array("tokenizer.ggml.tokens", [b"a", b"bc", b""]),
        kv_u32("general.alignment", 32),
    ]
    tis = [tensor_info("a", (8,), 0, 0), tensor_info("b", (4, 2), 0, 32)]
    return gguf(kvs, tis, bytes(range(64)))
