"""``build --reserve``: a fixed reservation in the summary, the dtsi and the stamp; a model
that does not fit is exit 10; without it nothing changes."""

from __future__ import annotations

import json

import pytest

from q25deploy.cli import main


def _build(capsys, model, out, *extra) -> tuple[int, str, str]:
    code = main(["build", "--target", "qemu", "--model", str(model), "--out", str(out), *extra])
    o = capsys.readouterr()
    return code, o.out, o.err


def test_reserve_fixes_the_regions_and_the_summary_says_what_the_model_uses(capsys, tmp_path, qwen25_tiny):
    code, out, _ = _build(capsys, qwen25_tiny, tmp_path / "a", "--reserve", "64MiB", "--json")
    assert code == 0
    mem = json.loads(out)["memory"]
    res = mem["reservation"]
    assert res["requested"] == res["size"] == mem["reserved"] == 64 << 20 and res["regions"] == 1
    assert 0 < res["used"] == sum(r["used"] for r in mem["regions"]) < 64 << 20 and res["spare"] == []
    assert [r["size"] for r in mem["regions"]] == [64 << 20]
    table = (tmp_path / "a" / "partitions" / "regions.tab").read_text().splitlines()[-1].split()
    assert int(table[1], 16) == mem["regions"][0]["base"] and int(table[2], 16) == 64 << 20  # the reservation's range
    assert "reg = <" in (tmp_path / "a" / "reserved-memory.dtsi").read_text()

    code, out, _ = _build(capsys, qwen25_tiny, tmp_path / "a", "--reserve", "64MiB")
    assert code == 0 and "reserve    fixed 64 MiB in 1 region(s): the model uses" in out


def test_reserve_leaves_spare_regions_reserved(capsys, tmp_path, qwen25_tiny):
    code, out, _ = _build(capsys, qwen25_tiny, tmp_path / "b", "--reserve", "1GiB", "--json")
    assert code == 0
    res = json.loads(out)["memory"]["reservation"]
    assert res["regions"] == 2 and len(res["spare"]) == 1 and res["size"] == 1 << 30
    dtsi = (tmp_path / "b" / "reserved-memory.dtsi").read_text()
    assert dtsi.count("no-map;") == 2 and "spare: part of the fixed reservation" in dtsi


def test_a_model_larger_than_the_reservation_is_exit_10(capsys, tmp_path, qwen25_tiny):
    code, _, err = _build(capsys, qwen25_tiny, tmp_path / "c", "--reserve", "2MiB")
    assert code == 10 and "fixed reservation" in err and "reserve more" in err
    assert not (tmp_path / "c" / "build.json").exists()


def test_reserve_must_be_a_size(capsys, tmp_path, qwen25_tiny):
    with pytest.raises(SystemExit) as e:
        main(["build", "--target", "qemu", "--model", str(qwen25_tiny), "--reserve", "lots"])
    assert e.value.code == 2
    assert "is not a size" in capsys.readouterr().err


def test_without_reserve_the_build_has_no_reservation(capsys, tmp_path, qwen25_tiny):
    code, out, _ = _build(capsys, qwen25_tiny, tmp_path / "d", "--json")
    assert code == 0 and "reservation" not in json.loads(out)["memory"]


def test_changing_the_reservation_rebuilds(capsys, tmp_path, qwen25_tiny):
    out = tmp_path / "e"
    first = json.loads(_build(capsys, qwen25_tiny, out, "--reserve", "64MiB", "--json")[1])
    again = json.loads(_build(capsys, qwen25_tiny, out, "--reserve", "64MiB", "--json")[1])
    plain = json.loads(_build(capsys, qwen25_tiny, out, "--json")[1])
    assert not first["up_to_date"] and again["up_to_date"] and not plain["up_to_date"]
    assert "reservation" not in plain["memory"] and plain["memory"]["reserved"] < 64 << 20
