"""The weights on the emulated Cortex-A53: a deployed release carries partitions/tensors.tab,
`q25tok tensor` finds each tensor in it at the partition map's place, and `q25tok dequant` of
the tensor's bytes in its partition gives, on the board, the float32 bits gguf-py gives on the
host (read back with od)."""

from __future__ import annotations

import json
import time

import numpy as np
from board_checks import INSTALL, fresh, q25
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize


def host_bits(partition: bytes, t: dict) -> np.ndarray:
    with np.errstate(all="ignore"):
        v = dequantize(np.frombuffer(partition, np.uint8, t["bytes"], t["offset"]), Q[t["type"]])
    return np.ascontiguousarray(v, np.float32).reshape(-1).view(np.uint32)


def test_the_board_dequantizes_its_tensors_as_the_host(board, builds, q25tok_aarch64, capsys):
    """The smallest tensor of each type; a NaN is compared by class (which NaN the CPU returns
    for inf * 0 differs: x86 0xffc00000, ARMv8 0x7fc00000; tests/runtime/test_dequant.py)."""
    fresh(board)
    code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0, res
    cur = f"{INSTALL}/current"
    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    parts = {r["index"]: (builds["qemu"] / r["file"]).read_bytes() for r in pmap["regions"]}
    smallest: dict[str, dict] = {}
    for t in pmap["tensors"]:
        if t["type"] not in smallest or t["bytes"] < smallest[t["type"]]["bytes"]:
            smallest[t["type"]] = t
    t0 = time.monotonic()
    for t in smallest.values():
        _, out, _ = board.sh(f"{cur}/q25tok tensor {cur}/partitions/tensors.tab {t['name']}")
        assert f" region {t['region']} offset {t['offset']:#x} bytes {t['bytes']} " in out, out
        part = f"{cur}/partitions/region_{t['region']:02d}.bin"
        _, out, _ = board.sh(
            f"tail -c +{t['offset'] + 1} {part} | head -c {t['bytes']} > /tmp/t.bin && "
            f"{cur}/q25tok dequant {t['type']} /tmp/t.bin > /tmp/t.f32 && od -An -v -tx4 /tmp/t.f32 "
            "&& rm /tmp/t.bin /tmp/t.f32",
            timeout=300,
        )
        got = np.array([int(w, 16) for w in out.split()], np.uint32)
        ref = host_bits(parts[t["region"]], t)
        nan = ((got & 0x7FFFFFFF) > 0x7F800000) & ((ref & 0x7FFFFFFF) > 0x7F800000)
        assert got.size == ref.size and ((got == ref) | nan).all(), f"{t['name']} ({t['type']}) differs"
    with capsys.disabled():
        print(
            f"\n{board.flavour}: {len(smallest)} tensors ({', '.join(sorted(smallest))}) bit-exact on the board "
            f"in {time.monotonic() - t0:.1f} s"
        )
