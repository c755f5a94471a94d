"""Residency on the host: `q25tok load` / `verify` of a build's region table, with a sparse
file standing in for /dev/mem (``--mem``) and a device-tree directory for the running tree
(``--dt``). The same on the emulated board's real /dev/mem: tests/deploy/emulated/test_board_regions.py."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
from requirements import need_program
from sparse_files import read_at, written, zero_between
from stuck_memory import stuck_library

from q25deploy.packer.region_table import TABLE, region_table


def fake_board(tmp_path: Path, pmap: dict, reserve: bool = True) -> tuple[Path, Path]:
    """A sparse 'physical memory' file covering every region, and a device tree reserving them."""
    mem = tmp_path / "mem"
    with open(mem, "wb") as f:
        f.truncate(max(r["base"] + r["size"] for r in pmap["regions"]))
    dt = tmp_path / "dt"
    for r in pmap["regions"]:
        node = dt / "reserved-memory" / r["node"]
        node.mkdir(parents=True)
        if reserve:
            (node / "reg").write_bytes(r["base"].to_bytes(8, "big") + r["size"].to_bytes(8, "big"))
            (node / "no-map").write_bytes(b"")
    return mem, dt


def run(q25tok: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(q25tok), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_build_writes_the_region_table(builds):
    b = builds["kv260"]
    pmap = json.loads((b / "partition_map.json").read_text())
    text = (b / TABLE).read_text()
    assert text == region_table(pmap)
    rows = [ln.split() for ln in text.splitlines() if not ln.startswith("#")]
    assert [(r[0], int(r[1], 16), int(r[2], 16), "partitions/" + r[3], int(r[4]), r[5]) for r in rows] == [
        (r["node"], r["base"], r["size"], r["file"], r["used"], r["sha256"]) for r in pmap["regions"]
    ]
    kinds = {a["path"]: a["kind"] for a in json.loads((b / "manifest.json").read_text())["artifacts"]}
    assert kinds[TABLE] == "region-table"


def test_load_then_verify_then_a_flipped_bit(tmp_path, builds, q25tok):
    b = builds["qemu"]
    pmap = json.loads((b / "partition_map.json").read_text())
    mem, dt = fake_board(tmp_path, pmap)
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.count(" loaded\n") == len(pmap["regions"])
    for reg in pmap["regions"]:
        part = (b / reg["file"]).read_bytes()
        assert read_at(mem, reg["base"], len(part)) == part
        assert zero_between(mem, reg["base"] + len(part), reg["base"] + reg["size"])
        assert f"sha256 {reg['sha256']} loaded" in r.stdout
    r = run(q25tok, "verify", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 0 and r.stdout.count(" resident\n") == len(pmap["regions"])
    reg = pmap["regions"][0]
    with open(mem, "r+b") as f:  # one bit in DDR changes
        f.seek(reg["base"] + reg["used"] // 2)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 4]))
    r = run(q25tok, "verify", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 6 and "MISMATCH" in r.stdout


def test_load_refuses_a_range_the_running_tree_does_not_reserve(tmp_path, builds, q25tok):
    b = builds["qemu"]
    pmap = json.loads((b / "partition_map.json").read_text())
    mem, dt = fake_board(tmp_path, pmap, reserve=False)
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 6 and "REFUSED the running device tree has no" in r.stdout
    assert not written(mem)  # nothing written
    node = dt / "reserved-memory" / pmap["regions"][0]["node"]
    reg = pmap["regions"][0]
    (node / "reg").write_bytes((reg["base"] + 0x200000).to_bytes(8, "big") + reg["size"].to_bytes(8, "big"))
    (node / "no-map").write_bytes(b"")
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 6 and "reserves another range" in r.stdout
    assert not written(mem)


@pytest.mark.parametrize(
    "line",
    [
        "q25-region0@1 0x1000 0x1000 region_00.bin 8192 " + "0" * 64,  # partition larger than the region
        "q25-region0@1 0x1000 0x1000 region_00.bin 10 abc",  # not a sha256
        "q25-region0@1 0x1000",  # short
        "q25-region0@1 0x1000 0x1000 region_00.bin 10 " + "0" * 64 + " extra",
    ],
)
def test_a_malformed_table_is_refused(tmp_path, q25tok, line):
    table = tmp_path / "regions.tab"
    table.write_text("# comment\n" + line + "\n")
    r = run(q25tok, "verify", "--mem", tmp_path / "nomem", "--dt", tmp_path, table)
    assert r.returncode == 6 and "not a region table" in r.stderr


def one_region_table(
    tmp_path: Path, data: bytes, *, node="q25-region0@100000", base=0x100000, size=0x10000, file="region_00.bin"
) -> Path:
    """A table of one region holding ``data`` (written as ``file`` beside it)."""
    import hashlib

    (tmp_path / "region_00.bin").write_bytes(data)
    table = tmp_path / "regions.tab"
    table.write_text(f"{node} {base:#x} {size:#x} {file} {len(data)} {hashlib.sha256(data).hexdigest()}\n")
    return table


def test_an_odd_partition_and_an_odd_tail(tmp_path, q25tok):
    """A partition of 16n+13 bytes: its last word and the first of the zeros after it are
    read-modify-written; every byte of the region ends up as planned, the bytes beside it
    untouched."""
    data = bytes((i * 7 + 3) & 0xFF for i in range(0x4000 * 2 + 29))  # 16n + 13: the tail after it is odd
    table = one_region_table(tmp_path, data)
    pmap = {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]}
    mem, dt = fake_board(tmp_path, pmap)
    with open(mem, "r+b") as f:  # old contents everywhere, and a neighbour after the region
        f.truncate(0x100000 + 0x10000 + 64)
        f.seek(0x100000)
        f.write(b"\xa5" * (0x10000 + 64))
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 0 and r.stdout.endswith(" loaded\n"), r.stdout + r.stderr
    ddr = mem.read_bytes()[0x100000:]
    assert ddr[: len(data)] == data and ddr[len(data) : 0x10000] == bytes(0x10000 - len(data))
    assert ddr[0x10000:] == b"\xa5" * 64
    r = run(q25tok, "verify", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 0 and r.stdout.endswith(" resident\n")


@pytest.mark.parametrize(
    "field,value",
    [
        ("node", "../../../../tmp/x"),
        ("node", "q25/../q25-region0@100000"),
        ("file", "../region_00.bin"),
        ("file", ".hidden"),
    ],
)
def test_names_in_the_table_are_plain_names(tmp_path, q25tok, field, value):
    """Issue 22 (6): NODE is joined into the device-tree path and FILE into the table's
    directory, so a '/' in either would read a `reg` and `no-map` of the table author's
    choosing, or load a file from anywhere. q25tok refuses the table before anything else."""
    table = one_region_table(tmp_path, b"weights", **{field: value})
    mem, dt = fake_board(tmp_path, {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]})
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 6 and "not a region table" in r.stderr, r.stdout + r.stderr
    assert not written(mem)


def test_a_missing_partition_is_reported_as_missing(tmp_path, q25tok):
    """Issue 22 (7): after a failed read the loader reported "wrong size" from a size it never
    set; now the real error, and valgrind finds no use of an uninitialised value."""
    table = one_region_table(tmp_path, b"weights")
    (tmp_path / "region_00.bin").unlink()
    mem, dt = fake_board(tmp_path, {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]})
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 1 and "region_00.bin: No such file or directory" in r.stdout, r.stdout
    assert not written(mem)
    valgrind = need_program("valgrind", "Debian: valgrind")
    v = subprocess.run(
        [valgrind, "-q", "--error-exitcode=99", str(q25tok), "load", "--mem", str(mem), "--dt", str(dt), str(table)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert v.returncode == 1 and "uninitialised" not in v.stderr, v.stderr
    (tmp_path / "region_00.bin").write_bytes(b"weights!")  # and one of another size than the table's
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 1 and "wrong size: 8 bytes, the table says 7" in r.stdout, r.stdout


@pytest.mark.parametrize("what", ["partition", "table"])
def test_a_fifo_where_a_file_should_be_never_blocks_load(tmp_path, q25tok, what):
    """Issue 33 (5): a FIFO at current/partitions/region_00.bin (or at the table) held
    `q25tok load` in open(2) forever (fopen before the regular-file check) and, in the boot
    service, the board's boot. Every file q25tok reads is opened O_NONBLOCK|O_NOFOLLOW and
    checked regular by fstat: refused at once, nothing written."""
    table = one_region_table(tmp_path, b"weights")
    target = tmp_path / ("region_00.bin" if what == "partition" else "regions.tab")
    target.unlink()
    os.mkfifo(target)
    if what == "table":
        table = target
    mem, dt = fake_board(tmp_path, {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]})
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, table)  # run()'s timeout: a block fails the test
    assert r.returncode == 1 and "not a regular file" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not written(mem)


def test_a_symlinked_partition_is_not_followed(tmp_path, q25tok):
    table = one_region_table(tmp_path, b"weights")
    (tmp_path / "elsewhere.bin").write_bytes(b"weights")
    (tmp_path / "region_00.bin").unlink()
    (tmp_path / "region_00.bin").symlink_to(tmp_path / "elsewhere.bin")
    mem, dt = fake_board(tmp_path, {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]})
    r = run(q25tok, "load", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 1 and "a symlink: not followed" in r.stdout, r.stdout + r.stderr
    assert not written(mem)


@pytest.mark.parametrize(
    "node,base",
    [
        ("rproc@70000000", 0x70000000),  # a remoteproc carve-out, reserved no-map by the board's tree
        ("q25-region0@1000", 0x100000),  # our name at another place
        ("q25-region0x@100000", 0x100000),
        ("xq25-region0@100000", 0x100000),
    ],
)
def test_load_writes_only_regions_that_are_ours_by_name_and_place(tmp_path, q25tok, node, base):
    """Issue 33 (4): the loader asked only whether a node was reserved no-map, so a table naming
    a foreign reservation (rproc@70000000, a PL DMA buffer) had it overwritten. A region is ours
    when its node is q25-region<N>@<its base in hex>; any other is refused, nothing written."""
    table = one_region_table(tmp_path, b"weights", node=node, base=base)
    mem, dt = fake_board(tmp_path, {"regions": [{"node": node, "base": base, "size": 0x10000}]})
    for command in ("load", "verify"):
        r = run(q25tok, command, "--mem", mem, "--dt", dt, table)
        assert r.returncode == 6 and f"region {node} " in r.stdout and " FOREIGN " in r.stdout, r.stdout
    assert not written(mem)


@pytest.mark.parametrize("what", ["symlink", "fifo"])
def test_the_memory_device_is_opened_without_following_a_link(tmp_path, q25tok, what):
    """/dev/mem (--mem) is a device, opened by q25_region_map with its own checks: no link
    followed (O_NOFOLLOW), nothing waited on (O_NONBLOCK), a character device or a regular file
    standing in for it after fstat. A link where it should be had load write its target, and a
    FIFO held verify in open(2)."""
    table = one_region_table(tmp_path, b"weights")
    (tmp_path / "board").mkdir()
    target, dt = fake_board(
        tmp_path / "board", {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]}
    )
    mem = tmp_path / "mem-link"
    mem.symlink_to(target) if what == "symlink" else os.mkfifo(mem)
    # load writes through the link; verify opens read-only, which blocked on the FIFO
    r = run(q25tok, "load" if what == "symlink" else "verify", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 1 and f"cannot map {mem}" in r.stdout, r.stdout + r.stderr
    assert not written(target)


def test_verify_diff_names_the_tensor_and_byte_range_of_a_flipped_bit(tmp_path, builds, q25tok):
    """Issue 45, item 3: one flipped bit in a region: ``verify --diff`` gives the partition's
    differing byte range, which the host maps to the tensor (name, bytes of its size); the
    region read through the same Device-memory accesses as ``verify``."""
    from q25deploy.deploy.state.residency import _add_differs, _region, differing_tensors

    b = builds["qemu"]
    pmap = json.loads((b / "partition_map.json").read_text())
    mem, dt = fake_board(tmp_path, pmap)
    assert run(q25tok, "load", "--mem", mem, "--dt", dt, b / TABLE).returncode == 0
    r = run(q25tok, "verify", "--diff", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 0 and "differs" not in r.stdout, r.stdout  # resident: nothing to tell
    t = next(t for t in pmap["tensors"] if t["name"] == "blk.1.ffn_up.weight")
    reg = pmap["regions"][t["region"]]
    at = t["offset"] + 1000
    with open(mem, "r+b") as f:
        f.seek(reg["base"] + at)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 0x10]))
    r = run(q25tok, "verify", "--diff", "--mem", mem, "--dt", dt, b / TABLE)
    assert r.returncode == 6 and "MISMATCH" in r.stdout
    assert f"differs {reg['node']} {at:#x} 1\n" in r.stdout, r.stdout
    lines = r.stdout.splitlines()
    regions = [x for x in map(_region, lines) if x]
    _add_differs(regions, lines)
    assert (
        differing_tensors(regions[t["region"]], pmap)
        == f"differs in blk.1.ffn_up.weight bytes 1000-1000 of {t['bytes']}"
    )

    after = min(
        (n for n in pmap["tensors"] if n["region"] == t["region"] and n["offset"] > t["offset"]),
        key=lambda n: n["offset"],
    )
    with open(mem, "r+b") as f:  # the last bytes of the tensor, the first of the next, a stray byte past the partition
        f.seek(reg["base"] + t["offset"] + t["bytes"] - 2)
        f.write(b"\xff\xff")
        f.seek(reg["base"] + after["offset"])
        f.write(b"\xff\xff")
        f.seek(reg["base"] + reg["used"] + 10)
        f.write(b"\x01")
    r = run(q25tok, "verify", "--diff", "--mem", mem, "--dt", dt, b / TABLE)
    lines = r.stdout.splitlines()
    regions = [x for x in map(_region, lines) if x]
    _add_differs(regions, lines)
    assert differing_tensors(regions[t["region"]], pmap) == (
        f"differs in blk.1.ffn_up.weight bytes 1000-1000 of {t['bytes']}, "
        f"blk.1.ffn_up.weight bytes {t['bytes'] - 2}-{t['bytes'] - 1} of {t['bytes']}, "
        f"{after['name']} bytes 0-1 of {after['bytes']}; tail not zero after the partition"
    )
    assert run(q25tok, "load", "--diff", "--mem", mem, "--dt", dt, b / TABLE).returncode == 2  # verify's alone


@pytest.mark.parametrize("compare", [False, True], ids=["hashed", "compared"])
def test_a_load_reads_back_what_it_wrote(tmp_path, q25tok, compare):
    """`q25tok load` reads every region back: hashed against the table's sha256, or with
    --compare (a deploy's load of partition files it has just received and hashed) compared
    chunk by chunk with the bytes written. Either way the same bytes land, and memory that does
    not keep them (a stuck address line, tests/stuck_memory.py: page 1 lands on page 0) is a
    MISMATCH, exit 6."""
    shim = stuck_library(tmp_path)
    data = random.Random(47).randbytes(0x3000 + 7)  # no two pages alike
    table = one_region_table(tmp_path, data)
    mem, dt = fake_board(tmp_path, {"regions": [{"node": "q25-region0@100000", "base": 0x100000, "size": 0x10000}]})
    flags = ["--compare"] if compare else []
    r = run(q25tok, "load", *flags, "--mem", mem, "--dt", dt, table)
    assert r.returncode == 0 and r.stdout.endswith(" loaded\n"), r.stdout + r.stderr
    assert ("compared loaded" in r.stdout) == compare and ("sha256 " in r.stdout) != compare
    ddr = mem.read_bytes()[0x100000:0x110000]
    assert ddr == data + bytes(0x10000 - len(data))
    stuck = subprocess.run(
        [str(q25tok), "load", *flags, "--mem", str(mem), "--dt", str(dt), str(table)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LD_PRELOAD": str(shim)},
    )
    assert stuck.returncode == 6 and stuck.stdout.endswith(" MISMATCH\n"), stuck.stdout + stuck.stderr
    assert mem.read_bytes()[0x100000:0x101000] == data[0x1000:0x2000]  # page 1's bytes landed on page 0
    r = run(q25tok, "verify", "--diff", "--mem", mem, "--dt", dt, table)
    assert r.returncode == 6 and "differs q25-region0@100000 0x0 4096" in r.stdout, r.stdout


def test_compare_is_a_load_option_only(tmp_path, q25tok):
    table = one_region_table(tmp_path, b"weights")
    r = run(q25tok, "verify", "--compare", "--mem", tmp_path / "mem", "--dt", tmp_path, table)
    assert r.returncode == 2 and "usage: q25tok verify" in r.stderr
