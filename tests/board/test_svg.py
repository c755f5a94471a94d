from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

from tensor_dirs import model

from q25deploy.board.boardfile import load_board
from q25deploy.board.plan import plan_memory
from q25deploy.board.svg import memory_svg
from q25deploy.resources import data_dir

SVG = "{http://www.w3.org/2000/svg}"


def test_svg_draws_banks_reservations_regions_and_partitions():
    board = load_board(data_dir("targets") / "kv260.toml")
    board = replace(board, layout=replace(board.layout, region_max_size=256 << 20))
    plan = plan_memory(model("1.5b"), board)
    root = ET.fromstring(memory_svg(board, plan))
    rects = root.iter(f"{SVG}rect")
    classes = [r.get("class") for r in rects]
    assert classes.count("bank") == 2
    assert classes.count("existing") == len(board.reserved)
    assert classes.count("region") == len(plan.regions) == classes.count("partition")
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for r in plan.regions:
        assert f"{r.label} @0x{r.base:x}" in text
    assert "pmu @0x7ff00000" in text and "ddr-high: 0x800000000-0x87fffffff (2 GiB)" in text
    for r in root.iter(f"{SVG}rect"):  # every shape lies inside the picture
        assert 0 <= float(r.get("x", 0)) <= float(root.get("width"))
