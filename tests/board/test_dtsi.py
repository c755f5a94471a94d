"""reserved-memory.dtsi compiled by dtc inside a skeleton of each board (memory node and the
board's existing reservations), then read back from the DTB with fdtget."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from requirements import need_program
from tensor_dirs import model

from q25deploy.board.boardfile import load_board
from q25deploy.board.dtsi import cells, reserved_memory_dtsi
from q25deploy.board.plan import plan_memory
from q25deploy.resources import data_dir


def skeleton(board) -> str:
    reg = ", ".join(f"<{cells(b.base)} {cells(b.size)}>" for b in board.banks)
    existing = "".join(
        f"\t\t{r.name}@{r.base:x} {{ reg = <{cells(r.base)} {cells(r.size)}>; no-map; }};\n"
        for r in board.reserved
        if r.in_device_tree
    )
    return (
        "/dts-v1/;\n/ {\n\t#address-cells = <2>;\n\t#size-cells = <2>;\n"
        f'\tmemory@{board.banks[0].base:x} {{ device_type = "memory"; reg = {reg}; }};\n'
        "\treserved-memory {\n\t\t#address-cells = <2>;\n\t\t#size-cells = <2>;\n\t\tranges;\n"
        f'{existing}\t}};\n}};\n/include/ "reserved-memory.dtsi"\n'
    )


def compile_and_read(tmp_path, board, dtsi: str):
    dtc = need_program("dtc", "Debian: device-tree-compiler")
    need_program("fdtget", "Debian: device-tree-compiler")
    (tmp_path / "reserved-memory.dtsi").write_text(dtsi)
    (tmp_path / "board.dts").write_text(skeleton(board))
    r = subprocess.run(
        [dtc, "-@", "-I", "dts", "-O", "dtb", "-o", str(tmp_path / "board.dtb"), str(tmp_path / "board.dts")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr  # no warnings either

    def fdtget(*args):
        return subprocess.run(
            ["fdtget", str(tmp_path / "board.dtb"), *args], capture_output=True, text=True, check=True
        ).stdout.split()

    return fdtget


@pytest.mark.parametrize("target", ["kv260", "zcu104", "qemu"])
def test_dtsi_compiles_into_the_board_tree_and_reads_back(tmp_path, target):
    board = load_board(data_dir("targets") / f"{target}.toml")
    board = replace(board, layout=replace(board.layout, region_max_size=128 << 20))
    plan = plan_memory(model("0.5b"), board)
    assert len(plan.regions) >= 3
    fdtget = compile_and_read(tmp_path, board, reserved_memory_dtsi(board, plan))
    assert fdtget("-t", "x", "/reserved-memory", "#address-cells") == ["2"]
    assert fdtget("-t", "x", "/reserved-memory", "#size-cells") == ["2"]
    nodes = fdtget("-l", "/reserved-memory")
    for r in plan.regions:
        assert r.node_name in nodes
        words = [int(w, 16) for w in fdtget("-t", "x", f"/reserved-memory/{r.node_name}", "reg")]
        assert ((words[0] << 32) | words[1], (words[2] << 32) | words[3]) == (r.base, r.size)
        props = fdtget("-p", f"/reserved-memory/{r.node_name}")
        assert "no-map" in props and "compatible" in props
        assert fdtget("-t", "s", "/__symbols__", r.label) == [f"/reserved-memory/{r.node_name}"]
    existing = [r for r in board.reserved if r.in_device_tree]
    assert len(nodes) == len(plan.regions) + len(existing)  # the board's own nodes are kept


def test_built_dtsi_matches_the_partition_map(tmp_path, qwen25_tiny):
    from q25deploy.cli import main

    out = tmp_path / "b"
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out)]) == 0
    board = load_board(data_dir("targets") / "kv260.toml")
    fdtget = compile_and_read(tmp_path, board, (out / "reserved-memory.dtsi").read_text())
    pmap = json.loads((out / "partition_map.json").read_text())
    for r in pmap["regions"]:
        words = [int(w, 16) for w in fdtget("-t", "x", f"/reserved-memory/{r['node']}", "reg")]
        assert (words[0] << 32 | words[1], words[2] << 32 | words[3]) == (r["base"], r["size"])
