"""`q25tok probe` (cli_probe.c) against the build's probe_digests.json (q25deploy/packer/probe.py,
gguf-py's numpy): equal on the tiny model's build, from the partition files (--files) and from
a file standing in for /dev/mem (--mem, --dt), on this machine under ASan+UBSan and on aarch64
under qemu-aarch64; one flipped byte in a tensor's last block is named. On the emulated board:
tests/deploy/emulated/test_board_probe.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_c_runtime import QEMU_LIBS, SAN_ENV, arm_q25tok, san_q25tok  # noqa: F401 (session fixtures)
from test_residency import fake_board

from q25deploy.builddir import BuildDir
from q25deploy.errors import SchemaError
from q25deploy.packer.probe import UNSUPPORTED, mismatches, tensor_digest
from q25deploy.schema import parse_probe_digests

REGIONS, TENSORS = "partitions/regions.tab", "partitions/tensors.tab"


def probe(exe: list, build: Path, *args, ids=None) -> subprocess.CompletedProcess:
    record = json.loads((build / "probe_digests.json").read_text())
    ids = record["ids"] if ids is None else ids
    cmd = [*map(str, exe), "probe", *map(str, args), build / REGIONS, build / TENSORS, *ids]
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=SAN_ENV, timeout=600, check=False)


def copy_build(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def loaded(exe: list, b: Path, tmp: Path) -> tuple[Path, Path]:
    """The build's partitions loaded into a fake board's memory by q25tok load."""
    mem, dt = fake_board(tmp, BuildDir(b).partition_map)
    r = subprocess.run(
        [*map(str, exe), "load", "--mem", str(mem), "--dt", str(dt), str(b / REGIONS)],
        capture_output=True,
        text=True,
        env=SAN_ENV,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return mem, dt


def last_block_byte(b: Path) -> tuple[str, dict, int]:
    """A byte in the last block of the last quantised tensor: the tensor's name, its region and
    the byte's offset in the region."""
    pmap = BuildDir(b).partition_map
    t = next(t for t in reversed(pmap["tensors"]) if t["type"] not in ("F32", "F16"))
    return t["name"], pmap["regions"][t["region"]], t["offset"] + t["bytes"] - 3


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def test_the_build_records_what_the_probe_prints(builds, san_q25tok, tmp_path):  # noqa: F811
    b = BuildDir(builds["qemu"])
    record = b.probe_digests
    assert b.manifest["probe_digests.json"].kind == "probe-digests"
    assert [t["name"] for t in record["tensors"]] == [t["name"] for t in b.partition_map["tensors"]]
    assert record["ids"] == sorted({i for _, _, ids in b.smoke_ids[1] for i in ids})
    r = probe([san_q25tok], b.path, "--files")
    assert r.returncode == 0, r.stderr
    assert mismatches(record, r.stdout) == []
    assert len(r.stdout.splitlines()) == len(record["tensors"])
    mem, dt = loaded([san_q25tok], b.path, tmp_path)
    r = probe([san_q25tok], b.path, "--mem", mem, "--dt", dt)
    assert r.returncode == 0 and mismatches(record, r.stdout) == [], r.stderr
    # the rows are part of the digest: other ids give another embedding line, and only that
    other = probe([san_q25tok], b.path, "--files", ids=record["ids"][:3])
    assert mismatches(record, other.stdout) == ["token_embd.weight"]


def test_on_aarch64(builds, arm_q25tok, tmp_path):  # noqa: F811
    b = builds["qemu"]
    exe = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm_q25tok]
    record = BuildDir(b).probe_digests
    r = probe(exe, b, "--files")
    assert r.returncode == 0 and mismatches(record, r.stdout) == [], r.stderr
    mem, dt = loaded(exe, b, tmp_path)
    r = probe(exe, b, "--mem", mem, "--dt", dt)
    assert r.returncode == 0 and mismatches(record, r.stdout) == [], r.stderr


def test_a_flipped_byte_in_a_last_block_names_the_tensor(builds, san_q25tok, tmp_path):  # noqa: F811
    b = copy_build(builds["qemu"], tmp_path / "b")
    record = BuildDir(b).probe_digests
    mem, dt = loaded([san_q25tok], b, tmp_path)
    name, region, offset = last_block_byte(b)
    flip(mem, region["base"] + offset)  # in the reserved region
    r = probe([san_q25tok], b, "--mem", mem, "--dt", dt)
    assert r.returncode == 0 and mismatches(record, r.stdout) == [name]
    flip(b / region["file"], offset)  # in the partition file
    r = probe([san_q25tok], b, "--files")
    assert r.returncode == 0 and mismatches(record, r.stdout) == [name]


def test_a_type_the_runtime_does_not_know_is_reported_not_hashed(builds, san_q25tok, tmp_path):  # noqa: F811
    b = copy_build(builds["qemu"], tmp_path / "b")
    table = (b / TENSORS).read_text().splitlines()
    i = next(i for i, ln in enumerate(table) if " 8 Q8_0 " in ln and not ln.startswith("token_embd"))
    name = table[i].split()[0]
    table[i] = table[i].replace(" 8 Q8_0 ", " 16 IQ2_XXS ")
    (b / TENSORS).write_text("\n".join(table) + "\n")
    r = probe([san_q25tok], b, "--files")
    assert r.returncode == 0, r.stderr
    assert f"{name} IQ2_XXS {UNSUPPORTED}\n" in r.stdout
    assert tensor_digest(b"\0" * 66, "IQ2_XXS", [256], []) == UNSUPPORTED


def test_refusals(builds, san_q25tok, tmp_path):  # noqa: F811
    b = builds["qemu"]
    mem, dt = fake_board(tmp_path, BuildDir(b).partition_map, reserve=False)
    r = probe([san_q25tok], b, "--mem", mem, "--dt", dt)
    assert r.returncode == 6 and "the running device tree has no" in r.stderr and r.stdout == ""
    r = probe([san_q25tok], b, "--files", ids=[10**6])
    assert r.returncode == 4 and "token id 1000000" in r.stderr
    assert probe([san_q25tok], b, "--files", ids=["x"]).returncode == 2


@pytest.mark.parametrize(
    "change",
    [
        {"format": "other"},
        {"ids": [-1]},
        {"tensors": [{"name": "a b", "type": "Q4_K", "digest": "0" * 64}]},
        {"tensors": [{"name": "a", "type": "Q4_K", "digest": "maybe"}]},
        {"tensors": [{"name": "a", "type": "Q4_K", "digest": "0" * 64}] * 2},
    ],
)
def test_the_schema_refuses_a_bad_record(builds, change):
    doc = {**BuildDir(builds["qemu"]).probe_digests, **change}
    with pytest.raises(SchemaError, match="probe_digests.json"):
        parse_probe_digests(doc, "probe_digests.json")


@pytest.mark.parametrize("what", ["fifo", "foreign"])
def test_probe_never_blocks_on_a_fifo_and_reads_only_our_regions(builds, san_q25tok, tmp_path, what):  # noqa: F811
    """Issue 33 (4, 5): a FIFO as a partition file held `probe --files` in open(2); a region
    whose node is not q25-region<N>@<base> is not read."""
    import os

    b = copy_build(builds["qemu"], tmp_path / "b")
    region = BuildDir(b).partition_map["regions"][0]
    if what == "fifo":
        (b / region["file"]).unlink()
        os.mkfifo(b / region["file"])
        r = probe([san_q25tok], b, "--files")
        assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr
    else:
        table = b / REGIONS
        table.write_text(table.read_text().replace(region["node"], f"rproc@{region['base']:x}"))
        r = probe([san_q25tok], b, "--files")
        assert r.returncode == 6 and f"rproc@{region['base']:x}: not a q25deploy region" in r.stderr, r.stderr
