"""`status --svg`: the build's memory map coloured with the regions a board reports. The plan
comes back from partition_map.json exactly (the picture without residency is the build's own
memory-map.svg, byte for byte); the picture with residency keeps its text inside the canvas and
apart and renders (rsvg-convert). The real board: tests/plugins/qemu/test_qemu_board.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from board.test_svg import SVG, check_layout, ink, png, render

from q25deploy.board.boardfile import load_board
from q25deploy.board.svg import RESIDENCY, UNKNOWN, memory_svg
from q25deploy.cli import main
from q25deploy.deploy.ops.status_svg import plan_from_map, region_residency, svg_paths, write_status_svgs
from q25deploy.errors import UsageError
from q25deploy.resources import data_dir

QEMU = load_board(data_dir("targets") / "qemu.toml")


def test_one_file_per_board():
    assert svg_paths("map.svg", ["root@b:22"]) == {"root@b:22": Path("map.svg")}
    assert svg_paths("maps/{host}.svg", ["root@10.0.0.1:22", "me@b/../x:2"]) == {
        "root@10.0.0.1:22": Path("maps/root@10.0.0.1_22.svg"),
        "me@b/../x:2": Path("maps/me@b_.._x_2.svg"),
    }
    with pytest.raises(UsageError, match="several boards need \\{host\\}"):
        svg_paths("map.svg", ["a", "b"])


def test_the_plan_comes_back_from_the_partition_map(builds):
    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    plan = plan_from_map(pmap, QEMU)
    assert memory_svg(QEMU, plan) == (builds["qemu"] / "memory-map.svg").read_text()


def pmap_of(n: int) -> dict:
    return {
        "regions": [
            {
                "index": i,
                "node": f"q25-region{i}@{0x100000000 + i * 0x200000:x}",
                "base": 0x100000000 + i * 0x200000,
                "size": 0x200000,
                "used": 0x100000,
                "bank": "ram",
                "sha256": f"{i:064x}",
            }
            for i in range(n)
        ],
        "tensors": [],
    }


def test_region_states_from_q25tok_verify():
    pmap = pmap_of(6)
    nodes = [r["node"] for r in pmap["regions"]]
    status = {
        "host": "h",
        "regions": [
            {"node": nodes[0], "state": "resident", "sha256": f"{0:064x}"},
            {"node": nodes[1], "state": "resident", "sha256": "f" * 64},  # another release's partition
            {"node": nodes[2], "state": "MISMATCH"},
            {"node": nodes[3], "state": "REFUSED", "detail": "not reserved"},
            {"node": nodes[4], "state": "FAILED"},
        ],
    }  # region 5: not reported
    assert region_residency(pmap, status) == {0: "resident", 1: "differs", 2: "differs", 3: "missing"}
    assert region_residency(pmap, {"host": "h", "error": "connection refused"}) == {}


def test_the_status_picture_is_laid_out_and_renders(tmp_path):
    pmap = pmap_of(3)
    status = {
        "host": "root@127.0.0.1:2222",
        "regions": [
            {"node": pmap["regions"][0]["node"], "state": "resident", "sha256": f"{0:064x}"},
            {"node": pmap["regions"][1]["node"], "state": "MISMATCH"},
        ],
    }
    out = tmp_path / "maps" / "board.svg"
    write_status_svgs({status["host"]: out}, [status], QEMU, pmap)
    assert status["svg"] == str(out) and not [p for p in out.parent.iterdir() if p != out]  # no temporary left
    root = check_layout(out.read_text())
    fills = [r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "region"]
    assert fills == [RESIDENCY["resident"][1], RESIDENCY["differs"][1], UNKNOWN[1]]
    w, h, rows, bpp = png(render(out.read_text(), tmp_path))
    assert (w, h) == (int(root.get("width")), int(root.get("height"))) and len(ink(rows, bpp)) > 1000
    colours = {bytes(row[x : x + 3]) for row in rows for x in range(0, len(row), bpp)}
    for state in ("resident", "differs"):
        assert bytes.fromhex(RESIDENCY[state][1][1:]) in colours, state  # the fills reach the pixels


def test_several_boards_without_host_in_the_name_are_refused_before_any_connection(builds, capsys, tmp_path):
    code = main(
        [
            "status",
            "--target",
            "qemu",
            "--build",
            str(builds["qemu"]),
            "--host",
            "root@127.0.0.1:1",
            "--host",
            "root@127.0.0.1:2",
            "--svg",
            str(tmp_path / "map.svg"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "several boards need {host}" in err and not list(tmp_path.iterdir())


def _no_bank(pmap):
    for r in pmap["regions"]:
        del r["bank"]


@pytest.mark.parametrize("change", [_no_bank, lambda m: m.pop("tensors")])
def test_a_map_without_banks_or_tensors_is_one_line_before_any_board(builds, capsys, tmp_path, change):
    """A partition_map.json lacking what the picture needs (issue 22, item 10): exit 1 with one
    line naming the file, before any board is contacted, nothing written (was KeyError, exit 70)."""
    build = tmp_path / "build"
    shutil.copytree(builds["qemu"], build)
    pmap = json.loads((build / "partition_map.json").read_text())
    change(pmap)
    (build / "partition_map.json").write_text(json.dumps(pmap))
    code = main(
        [
            "status",
            "--target",
            "qemu",
            "--build",
            str(build),
            "--host",
            "root@127.0.0.1:1",
            "--svg",
            str(tmp_path / "map.svg"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and "partition_map.json" in err and "internal" not in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "map.svg").exists()
