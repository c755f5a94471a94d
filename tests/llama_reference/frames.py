"""Length-prefixed pickle frames between the tests and their llama.cpp child (a private pipe
between two processes of one test run: nothing else writes to it)."""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct("<Q")


def write_frame(out: BinaryIO, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(HEADER.pack(len(data)) + data)


def read_exactly(src: BinaryIO, n: int) -> bytes | None:
    """``n`` bytes, or None at the end of the stream (the other side is gone)."""
    parts, left = [], n
    while left:
        chunk = src.read(left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(src: BinaryIO) -> Any | None:
    head = read_exactly(src, HEADER.size)
    if head is None:
        return None
    body = read_exactly(src, HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)
