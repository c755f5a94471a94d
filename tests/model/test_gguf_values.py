from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf_craft import ARRAY, STRING, UINT32, s

from q25deploy.errors import GGUFError
from q25deploy.model.gguf_values import MAX_ARRAY_DEPTH, StringArray, ValueReader

BOOL = 7


def reader(data: bytes) -> ValueReader:
    return ValueReader(memoryview(data), len(data), "v.gguf")


def nested(depth: int) -> bytes:
    """An array value nested ``depth`` arrays deep around one empty uint32 array."""
    inner = struct.pack("<IQ", UINT32, 0)
    for _ in range(depth - 1):
        inner = struct.pack("<IQ", ARRAY, 1) + inner
    return inner


def test_scalars_strings_and_arrays_with_their_end_offsets():
    r = reader(struct.pack("<I", 7) + s("hé") + struct.pack("<IQ", BOOL, 3) + bytes([1, 0, 2]))
    assert r.value(UINT32, 0, "k", 0) == (7, 4, UINT32)
    assert r.value(STRING, 4, "k", 0) == ("hé", 4 + 8 + 3, STRING)
    arr, end, tinfo = r.value(ARRAY, 15, "k", 0)
    assert arr.dtype == bool and arr.tolist() == [True, False, True]
    assert (end, tinfo) == (15 + 12 + 3, (ARRAY, BOOL))


def test_string_arrays_are_lazy_views():
    items = [b"a", b"", b"\xff\xfe", b"xyz"]
    data = struct.pack("<IQ", STRING, len(items)) + b"".join(s(i) for i in items)
    arr, end, _ = reader(data).array(0, "k", 0)
    assert isinstance(arr, StringArray) and end == len(data) == arr.end
    assert arr.to_list() == items and arr[2] == b"\xff\xfe" and arr[1:3] == items[1:3] and len(arr) == 4


def test_nesting_is_limited():
    arr, _, _ = reader(nested(MAX_ARRAY_DEPTH)).value(ARRAY, 0, "k", 0)
    assert isinstance(arr, list) and arr[0][0][0].dtype == np.uint32 and len(arr[0][0][0]) == 0
    with pytest.raises(GGUFError, match="v.gguf: 'k': arrays nested deeper than 4"):
        reader(nested(MAX_ARRAY_DEPTH + 1)).value(ARRAY, 0, "k", 0)


@pytest.mark.parametrize(
    "data, call, message",
    [
        (
            b"\0\0",
            lambda r: r.u32(0, "count"),
            "v.gguf is truncated: it ends at byte 2 but its header (count) needs 4 bytes",
        ),
        (
            struct.pack("<Q", 9) + b"ab",
            lambda r: r.string(0, "key"),
            "is truncated: it ends at byte 10 but its header (key) needs 17 bytes",
        ),
        (b"\xc3", lambda r: r.text(b"\xc3", "key"), "key is not valid UTF-8"),
        (struct.pack("<IQ", 99, 0), lambda r: r.array(0, "k", 0), "'k': unknown array element type 99"),
        (
            struct.pack("<IQ", UINT32, 5) + bytes(16),
            lambda r: r.array(0, "k", 0),
            "is truncated: it ends at byte 28 but its header (metadata 'k') needs 32 bytes",
        ),
        (
            struct.pack("<IQ", STRING, 2) + s("ab") + struct.pack("<Q", 1 << 63),
            lambda r: r.array(0, "k", 0),
            "'k': string array runs past the end of the file",
        ),
    ],
)
def test_every_bad_read_is_one_gguf_error(data, call, message):
    with pytest.raises(GGUFError) as e:
        call(reader(data))
    assert str(e.value).startswith("v.gguf") and message in str(e.value) and "\n" not in str(e.value)
