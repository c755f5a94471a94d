"""Regions are ours by name and place (q25deploy/board/ours.py, issue 33 item 4): every region a
plan makes is, and a region of another name, of another base, on the board file's reserved
memory or outside its banks is not."""

from __future__ import annotations

import pytest
from tensor_dirs import model

from q25deploy.board.boardfile import load_board
from q25deploy.board.ours import foreign, why_not_ours
from q25deploy.board.plan import plan_memory
from q25deploy.resources import data_dir


@pytest.mark.parametrize("target", ["kv260", "zcu104", "qemu"])
def test_every_planned_region_is_ours(target):
    board = load_board(data_dir("targets") / f"{target}.toml")
    plan = plan_memory(model("tiny"), board)
    regions = [{"node": r.node_name, "base": r.base, "size": r.size} for r in plan.regions + plan.spare]
    assert regions and foreign(board, regions) is None


@pytest.mark.parametrize(
    ("region", "why"),
    [
        ({"node": "rproc@70000000", "base": 0x70000000, "size": 0x200000}, "not a q25deploy region"),
        ({"node": "q25-region0@80000000", "base": 0x70000000, "size": 0x200000}, "not a q25deploy region"),
        ({"node": "q25-region00@70000000", "base": 0x70000000, "size": 0x200000}, "not a q25deploy region"),
        ({"node": "q25-region0@48000000", "base": 0x48000000, "size": 0x200000}, "reserved qemu-initrd-and-dtb"),
        ({"node": "q25-region0@13ff00000", "base": 0x13FF00000, "size": 0x200000}, "memory banks"),
        ({"node": "q25-region0@70000000", "base": 0x70000000, "size": 0}, "no size"),
    ],
)
def test_a_region_of_another_name_or_place_is_not(region, why):
    board = load_board(data_dir("targets") / "qemu.toml")
    assert why in (why_not_ours(board, region) or "")
    assert f"{region['node']!r}" in (foreign(board, [region]) or "")
    assert why_not_ours(board, {**region, "node": "q25-region0@70000000", "base": 0x70000000, "size": 0x200000}) is None
