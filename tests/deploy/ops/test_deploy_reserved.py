"""deploy against the board's live reserved memory, over a real sshd: a plan the running device
tree cannot hold is refused before anything is sent; status says whether the current plan is
reserved; one fixed reservation (build --reserve) takes models of two sizes, each resident.

The device tree and /dev/mem are system paths (not under --remote-root): a board file points
them at this test's stand-ins, a directory shaped like /proc/device-tree and a sparse file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_helpers import board_argv, deploy
from reserved_standin import boot_with, with_standins

from q25deploy.cli import main
from q25deploy.model.synthetic import write_model
from q25deploy.resources import data_dir

VOCAB = Path(__file__).parents[2] / "data" / "ggml-vocab-qwen2.gguf"


def board_file(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(board file, its device tree, its memory): the qemu board with stand-in system paths."""
    dt, mem = tmp_path / "live-dt", tmp_path / "physmem"
    f = tmp_path / "qemu-here.toml"
    f.write_text(with_standins((data_dir("targets") / "qemu.toml").read_text(), dt, mem))
    (dt / "reserved-memory").mkdir(parents=True)
    return f, dt, mem


def reserved_board(tmp_path: Path, build: Path) -> tuple[tuple[str, str], Path, Path]:
    """A board booted with an image that reserves ``build``'s regions: (the ``--target-file``
    arguments, its device tree, its memory)."""
    bf, dt, mem = board_file(tmp_path)
    boot_with(dt, mem, build)
    return ("--target-file", str(bf)), dt, mem


def resident(mem: Path, build: Path) -> bool:
    """The regions hold the build's partitions (read back from the memory file)."""
    pmap = json.loads((build / "partition_map.json").read_text())
    with open(mem, "rb") as f:
        for r in pmap["regions"]:
            f.seek(r["base"])
            if f.read(r["used"]) != (build / r["file"]).read_bytes():
                return False
    return True


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> dict[str, Path]:
    """tiny and tiny-untied, each built with a fixed 256 MiB reservation and without one."""
    d = tmp_path_factory.mktemp("sized")
    out = {}
    for preset in ("tiny", "tiny-untied"):
        write_model(d / f"{preset}.gguf", preset, str(VOCAB))
        for name, extra in ((preset, []), (f"{preset}+reserve", ["--reserve", "256MiB"])):
            argv = ["build", "--target", "qemu", "--model", str(d / f"{preset}.gguf"), "--out", str(d / name)]
            assert main(argv + extra) == 0
            out[name] = d / name
    return out


def test_an_unreservable_plan_is_refused_before_anything_is_sent(tmp_path, capsys, ssh, sized, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    here, dt, mem = reserved_board(tmp_path, sized["tiny"])  # tiny's plan; tiny-untied needs a larger region
    code, res, _ = deploy(capsys, ssh, srv, root, sized["tiny-untied"], *here, runtime=q25tok, unreserved=False)
    assert code == 13 and not res[0]["ok"] and res[0]["bytes_sent"] == 0 and res[0]["files_sent"] == 0
    err = res[0]["error"]
    assert f"the board's {dt}/reserved-memory does not reserve 1 of the build's 1 region(s) (q25-region0@" in err
    assert " absent)" in err and "reserved-memory.dtsi" in err and "--allow-unreserved" in err
    assert not (root / "lib" / "firmware" / "q25" / "releases").exists()
    code, res, _ = deploy(capsys, ssh, srv, root, sized["tiny-untied"], *here, runtime=q25tok)  # --allow-unreserved
    assert code == 0 and res[0]["ok"] and res[0]["bytes_sent"] > 0
    assert any(w.startswith("sent anyway (--allow-unreserved): the board's") for w in res[0]["warnings"])
    assert res[0]["residency"]["state"] == "not-reserved" and not resident(mem, sized["tiny-untied"])

    code, res, _ = deploy(capsys, ssh, srv, root, sized["tiny-untied"], *here, action="status")
    assert code == 0 and res[0]["reserved"] is False
    assert [u["node"] for u in res[0]["unreserved"]] == [
        r["node"] for r in json.loads((sized["tiny-untied"] / "partition_map.json").read_text())["regions"]
    ]


def test_status_says_whether_the_current_plan_is_reserved(tmp_path, capsys, ssh, sized, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    here, dt, _ = reserved_board(tmp_path, sized["tiny"])
    code, res, _ = deploy(capsys, ssh, srv, root, sized["tiny"], *here, runtime=q25tok, unreserved=False)
    assert code == 0 and res[0]["ok"] and res[0]["residency"]["state"] == "resident" and not res[0]["warnings"]
    code, res, _ = deploy(capsys, ssh, srv, root, sized["tiny"], *here, action="status")
    assert code == 0 and res[0]["reserved"] is True and res[0]["unreserved"] == []
    capsys.readouterr()
    argv = board_argv("status", ssh, srv, root, *here, known_hosts=srv.known_hosts(tmp_path / "kh"))
    assert main(argv) == 0
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert head.split() == ["host", "ok", "current", "previous", "reserved", "residency", "detail"]
    assert row.split()[4:6] == ["yes", "resident"]
    for node in (dt / "reserved-memory").iterdir():  # an image without the fragment
        (node / "no-map").unlink()
    assert main(argv) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.split()[4] == "NO" and "unreserved: q25-region0@" in row


def test_status_reports_this_boots_load_and_reads_the_regions_back_when_asked(tmp_path, capsys, ssh, sized, q25tok):
    """``status`` reports the regions from this boot's load record (the deploy's load read
    them back); ``--verify`` reads them back now, and finds a byte changed since. A record
    of another table (or another boot) is read back, and status never writes or removes it."""
    srv, root, build = ssh["servers"][0], tmp_path / "board", sized["tiny"]
    here, _, mem = reserved_board(tmp_path, build)
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, runtime=q25tok, unreserved=False)
    assert code == 0 and res[0]["residency"]["state"] == "resident", res
    region = json.loads((build / "partition_map.json").read_text())["regions"][0]
    with open(mem, "r+b") as f:  # something wrote into the region after the load
        f.seek(region["base"] + 100)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 0x10]))
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, action="status")
    assert code == 0 and res[0]["residency"] == "resident" and res[0]["residency_by"] == "load record", res
    argv = board_argv("status", ssh, srv, root, *here, known_hosts=srv.known_hosts(tmp_path / "kh"))
    capsys.readouterr()
    assert main(argv) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.split()[5] == "resident" and "regions as loaded this boot, not read back (--verify)" in row
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, "--verify", action="status")
    assert code == 0 and res[0]["residency"] == "failed" and res[0]["residency_by"] == "read back", res
    assert [r["state"] for r in res[0]["regions"]] == ["MISMATCH"]
    stamp = root / "lib" / "firmware" / "q25" / ".q25deploy-loaded"
    stale = stamp.read_text().replace(stamp.read_text().split()[0], "0" * 36)  # another boot's
    stamp.write_text(stale)
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, action="status")
    assert res[0]["residency"] == "failed" and res[0]["residency_by"] == "read back", res
    assert stamp.read_text() == stale


def test_one_fixed_reservation_takes_two_model_sizes_each_resident(tmp_path, capsys, ssh, sized, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    small, large = sized["tiny+reserve"], sized["tiny-untied+reserve"]
    here, _, mem = reserved_board(tmp_path, small)  # the image: the 256 MiB reservation
    used = [json.loads((b / "build.json").read_text())["memory"]["reservation"]["used"] for b in (small, large)]
    assert used[0] < used[1] < 256 << 20
    for build in (small, large, small):
        code, res, _ = deploy(capsys, ssh, srv, root, build, *here, runtime=q25tok, unreserved=False)
        assert code == 0 and res[0]["ok"] and res[0]["residency"]["state"] == "resident", res
        assert resident(mem, build)
    # the same model sized to itself needs other regions: that image cannot hold it
    code, res, _ = deploy(capsys, ssh, srv, root, sized["tiny-untied"], *here, runtime=q25tok, unreserved=False)
    assert code == 13 and res[0]["bytes_sent"] == 0 and "does not reserve" in res[0]["error"]


def test_a_flipped_bit_in_a_region_names_the_tensor_and_its_bytes(tmp_path, capsys, ssh, models, q25tok):
    """Issue 45, item 3: smoke's default output names the tensor whose bytes differ in a
    region and the byte range, not only ``MISMATCH``."""
    srv, root, build = ssh["servers"][2], tmp_path / "board", models["A"]
    here, _, mem = reserved_board(tmp_path, build)
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, runtime=q25tok, unreserved=False)
    assert code == 0, res
    pmap = json.loads((build / "partition_map.json").read_text())
    t = next(t for t in pmap["tensors"] if t["name"] == "blk.1.ffn_up.weight")
    reg = pmap["regions"][t["region"]]
    with open(mem, "r+b") as f:
        f.seek(reg["base"] + t["offset"] + 1000)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 1]))
    capsys.readouterr()
    code = main(board_argv("smoke", ssh, srv, root, "--build", str(build), *here, "--forward", "0"))
    out = capsys.readouterr().out
    assert code == 13, out
    # the default output: the failed check's line under the board, first, naming tensor and bytes
    want = f"FAIL residency  {reg['node']}: MISMATCH: differs in blk.1.ffn_up.weight bytes 1000-1000 of {t['bytes']}"
    assert out.splitlines()[2].strip() == want, out


def test_a_deploy_compares_the_partitions_it_sent_and_hashes_those_it_linked(tmp_path, capsys, ssh, sized, q25tok):
    """The load after a deploy's switch compares what it reads back with the partition files
    that deploy has just sent (each hashed as the board wrote it: ``load --compare``, no
    sha256 in its report); a release whose partitions were linked from a kept one, and the
    load after a rollback, hash what they read back (the region's sha256 is reported)."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    small, large = sized["tiny+reserve"], sized["tiny-untied+reserve"]
    here, _, mem = reserved_board(tmp_path, small)
    sha = {
        b: [r["sha256"] for r in json.loads((b / "partition_map.json").read_text())["regions"]] for b in (small, large)
    }
    for build, sent in ((small, True), (large, True), (small, False)):
        code, res, _ = deploy(capsys, ssh, srv, root, build, *here, runtime=q25tok, unreserved=False)
        assert code == 0 and res[0]["residency"]["state"] == "resident", res
        regions = res[0]["residency"]["regions"]
        assert (res[0]["files_sent"] > 0) == sent
        assert [r.get("sha256") for r in regions] == ([None] * len(regions) if sent else sha[build]), regions
        assert resident(mem, build)
    code, res, _ = deploy(capsys, ssh, srv, root, small, *here, action="rollback")
    assert code == 0 and [r.get("sha256") for r in res[0]["residency"]["regions"]] == sha[large], res
    assert resident(mem, large)
