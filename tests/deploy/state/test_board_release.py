"""The board's own partition map (q25deploy/deploy/state/board_release.py) is input: through the
schema, and with the board file, every region ours there (issue 33, item 4)."""

from __future__ import annotations

import json

import pytest

from q25deploy.board.boardfile import load_board
from q25deploy.deploy.state.board_release import partition_map
from q25deploy.errors import DeployError
from q25deploy.resources import data_dir


class Files:
    """The part of BoardFiles the map's reader names in its errors."""

    class board:
        class spec:
            name = "root@b:22"

    def cur(self, rel: str) -> str:
        return f"/lib/firmware/q25/current/{rel}"

    def cur_rel(self, rel: str) -> str:
        return f"current/{rel}"


@pytest.mark.parametrize(
    ("base", "why"),
    [(0x48000000, "overlaps qemu's reserved qemu-initrd-and-dtb"), (0x70000000, None)],
)
def test_the_boards_own_map_is_checked_against_the_board_file(builds, base, why):
    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    pmap["regions"][0].update(node=f"q25-region0@{base:x}", base=base)
    data = json.dumps(pmap).encode()
    board = load_board(data_dir("targets") / "qemu.toml")
    assert partition_map(Files(), data=data)["regions"][0]["base"] == base  # without the board file: the schema only
    if why is None:
        assert partition_map(Files(), data=data, board=board)["regions"][0]["base"] == base
        return
    with pytest.raises(DeployError, match=f"root@b:22: .*partition_map.json: region 'q25-region0@{base:x}'.*{why}"):
        partition_map(Files(), data=data, board=board)
