"""What the emulated-board tests share: running the CLI, a clean install path, the
board's memory as /proc/iomem and QEMU see it."""

from __future__ import annotations

import json
from pathlib import Path

import emulated_board as eb
import pytest

from q25deploy.cli import main

INSTALL = "/lib/firmware/q25"
# a board test runs on the dropbear board (the BusyBox board's usual SSH server); one whose
# subject is the SSH server (the transport: deploy's uploads, smoke, rollback; the pairing
# negotiated) runs on both flavours
both_flavours = pytest.mark.parametrize("board", eb.FLAVOURS, indirect=True)


def q25(capsys, argv: list[str]) -> tuple[int, object]:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip().startswith(("[", "{")) else out)


def fresh(board) -> None:
    board.sh(f"rm -rf {INSTALL}")


def iomem(board) -> list[tuple[int, int, str, int]]:
    """/proc/iomem as (start, end, name, depth)."""
    rows = []
    for line in board.sh("cat /proc/iomem")[1].splitlines():
        span, _, name = line.partition(" : ")
        start, end = span.strip().split("-")
        rows.append((int(start, 16), int(end, 16), name.strip(), len(span) - len(span.lstrip())))
    return rows


def system_ram(board) -> int:
    return sum(end - start + 1 for start, end, name, depth in iomem(board) if name == "System RAM" and depth == 0)


def resident(board, build: Path, tmp_path: Path) -> bool:
    """Each region's bytes in guest physical memory (read by QEMU, outside the guest) are
    the build's partition followed by zeros."""
    for r in json.loads((build / "partition_map.json").read_text())["regions"]:
        ddr = eb.read_physical(board.qemu, r["base"], r["size"], tmp_path / f"ddr-{r['index']}.bin")
        part = (build / r["file"]).read_bytes()
        if ddr[: len(part)] != part or ddr[len(part) :].strip(b"\0"):
            return False
    return True


def cells(board, path: str) -> int:
    raw = bytes.fromhex("".join(board.sh(f"od -An -v -tx1 {path}")[1].split()))
    return int.from_bytes(raw, "big")
