"""The board's live reserved memory against a build's regions: the listing script run by a real
shell on a stand-in device tree, its parse (total: a hostile answer is None, never an
exception), and the verdict q25tok load would give."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from requirements import need_program

from q25deploy.deploy.state.reserved import LISTING, parse_listing, refusal, split_listing, unheld, why_not_held

REGION = {"node": "q25-region0@13fe00000", "base": 0x13FE00000, "size": 0x200000}


def make_node(dt: Path, name: str, base: int, size: int, *, no_map: bool = True, reg: bytes | None = None) -> None:
    node = dt / "reserved-memory" / name
    node.mkdir(parents=True)
    (node / "reg").write_bytes(struct.pack(">QQ", base, size) if reg is None else reg)
    if no_map:
        (node / "no-map").write_bytes(b"")


def listing(dt: str) -> bytes:
    """What the board answers: LISTING's framed document (``$4`` the device tree)."""
    need_program("od", "Debian: coreutils")
    out = subprocess.run(["sh", "-c", LISTING, "sh", "-", "-", "-", dt], capture_output=True, check=True).stdout
    listed = split_listing(out)
    assert listed is not None and listed[1] == b""
    return listed[0]


def test_a_board_that_reserves_the_region_holds_it(tmp_path):
    make_node(tmp_path, REGION["node"], REGION["base"], REGION["size"])
    make_node(tmp_path, "pmu@7ff00000", 0x7FF00000, 0x100000)
    (tmp_path / "reserved-memory" / "ranges").write_bytes(b"")  # a property, not a node
    live = parse_listing(listing(str(tmp_path)))
    assert live == {
        "tree": "present",
        "nodes": {
            REGION["node"]: {"reg": struct.pack(">QQ", REGION["base"], REGION["size"]), "no_map": True},
            "pmu@7ff00000": {"reg": struct.pack(">QQ", 0x7FF00000, 0x100000), "no_map": True},
        },
    }
    assert unheld([REGION], live) == [] and refusal([REGION], live, "/proc/device-tree") is None


@pytest.mark.parametrize(
    "kw, why",
    [
        (
            {"size": 0x400000},
            "reserves another range",
        ),  # a larger reservation under the same name: not what the table says
        ({"no_map": False}, "not no-map"),
        ({"reg": b"\x00" * 8}, "reserves another range"),  # one cell pair short
    ],
)
def test_what_q25tok_load_would_refuse_is_not_held(tmp_path, kw, why):
    args = {"base": REGION["base"], "size": REGION["size"], **kw}
    make_node(tmp_path, REGION["node"], args.pop("base"), args.pop("size"), **args)
    live = parse_listing(listing(str(tmp_path)))
    assert why_not_held(REGION, live) == why


def test_another_owners_reservation_is_never_held_for_us(tmp_path):
    """A region table naming a foreign no-map node (a remoteproc carve-out) that the live tree
    reserves exactly as named is not held: the region is not ours (issue 33, item 4)."""
    rproc = {"node": "rproc@70000000", "base": 0x70000000, "size": 0x200000}
    make_node(tmp_path, rproc["node"], rproc["base"], rproc["size"])
    live = parse_listing(listing(str(tmp_path)))
    assert why_not_held(rproc, live) == "not a q25deploy region"
    assert "rproc@70000000" in (refusal([rproc], live, "/proc/device-tree") or "")


def test_no_device_tree_or_no_reserved_memory_answers_and_refuses(tmp_path):
    none = parse_listing(listing(str(tmp_path / "absent")))
    (tmp_path / "dt").mkdir()
    empty = parse_listing(listing(str(tmp_path / "dt")))
    assert none == {"tree": "none", "nodes": {}} and empty == {"tree": "empty", "nodes": {}}
    msg = refusal([REGION], none, "/proc/device-tree")
    assert msg is not None and "\n" not in msg
    assert msg.startswith(
        "the board has no /proc/device-tree, so does not reserve 1 of the build's 1 region(s) "
        "(q25-region0@13fe00000 [0x13fe00000, 0x140000000) absent)"
    )
    assert "reserved-memory.dtsi" in msg and "--allow-unreserved" in msg and "nothing was sent" in msg
    assert "has no reserved-memory node" in refusal([REGION], empty, "/proc/device-tree")


@pytest.mark.parametrize(
    "answer",
    [
        b"",
        b"tree",
        b"tree maybe",
        b"tree present\nnode",
        b"tree present\nnode a 1 00",  # the reg belongs on od's lines
        b"tree present\nnode a 2",
        b"tree present\n 00 01",  # bytes before any node
        b"tree present\nnode a 1\n 0g",
        b"tree present\nnode a 1\n 0",
        b"tree present\nnode a 1\nnode a 1",
        b"tree none\nnode a 1",
        b"tree present\nnode a\x1b[2J 1",
        b"tree present\n\xff",
        b"tree present\n",
        b"tree present\nnode " + b"a" * 200 + b" 1",
        b"tree present\nnode a 1\n" + b" 00" * 16 * 17 + b"\n",
        b"tree present\nnode a 1\n" + b" 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n" * 17,
        b"tree present\n" + b"".join(b"node a%d 1\n" % i for i in range(2000)),
    ],
)
def test_a_hostile_answer_is_none_never_an_exception(answer):
    assert parse_listing(answer) is None


def test_a_node_name_with_a_space_makes_the_answer_malformed(tmp_path):
    make_node(tmp_path, "q25 region0", REGION["base"], REGION["size"])
    assert parse_listing(listing(str(tmp_path))) is None


def test_the_listing_ends_at_its_end_line():
    assert split_listing(b"end\nreleases/0123456789abcdef\n") == (b"", b"releases/0123456789abcdef\n")
    assert split_listing(b"tree present\nnode end 1\nend\n") == (b"tree present\nnode end 1", b"")
    assert split_listing(b"tree none\n") is None and split_listing(b"") is None
