"""A board's reserved memory, stood in for: a board file whose device tree and /dev/mem are a
directory shaped like /proc/device-tree and a sparse file, "booted" with an image built with a
build's reserved-memory.dtsi. Used by the reserved-memory deploy tests and bench/bench_deploy.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def with_standins(board_text: str, dt: Path, mem: Path) -> str:
    """``board_text`` (a board file) with its device tree and memory device at ``dt`` and ``mem``."""
    head, sep, rest = board_text.partition("\narch = ")
    assert sep, "a board file has an arch line"
    return f'{head}\ndevice_tree = "{dt}"\nmemory_device = "{mem}"{sep}{rest}'


def _regions(build: Path) -> list[dict]:
    m = json.loads((build / "build.json").read_text())["memory"]
    return [dict(r, index=i) for i, r in enumerate(m["regions"] + m.get("reservation", {}).get("spare", []))]


def boot_with(dt: Path, mem: Path, build: Path) -> None:
    """The device tree and memory of an image built with ``build``'s reserved-memory.dtsi."""
    regions = _regions(build)
    (dt / "reserved-memory").mkdir(parents=True, exist_ok=True)
    for r in regions:
        node = dt / "reserved-memory" / f"q25-region{r['index']}@{r['base']:x}"
        node.mkdir(parents=True)
        (node / "reg").write_bytes(struct.pack(">QQ", r["base"], r["size"]))
        (node / "no-map").write_bytes(b"")
    with open(mem, "ab") as f:
        f.truncate(max(r["base"] + r["size"] for r in regions))


def power_cycle(mem: Path, build: Path, pattern: bytes = b"\xa5\x5a") -> None:
    """The regions of ``build`` after a power cycle: present and holding none of our bytes.
    DDR is there from the first store, so every page of the stand-in is written (with
    ``pattern``, never zeros: a load that leaves a region's tail as it found it shows), not a
    hole the first store would make the kernel allocate (a cost no board has: 0.7-1.2 s of a
    392 MB load on a 2-core host)."""
    block = pattern * ((1 << 20) // len(pattern))
    with open(mem, "r+b") as f:
        for r in _regions(build):
            f.seek(r["base"])
            for off in range(0, r["size"], len(block)):
                f.write(block[: min(len(block), r["size"] - off)])
