"""A fixed reservation ([layout] reserve, build --reserve): the same regions for every model."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tensor_dirs import model

from q25deploy.board.boardfile import load_board
from q25deploy.board.dtsi import reserved_memory_dtsi
from q25deploy.board.plan import plan_memory, reservation_regions, reservation_sizes
from q25deploy.errors import FitError
from q25deploy.resources import data_dir

TARGETS = data_dir("targets")


def _board(reserve: int, name: str = "kv260"):
    b = load_board(TARGETS / f"{name}.toml")
    return replace(b, layout=replace(b.layout, reserve=reserve))


def test_the_reservation_is_cut_into_equal_aligned_regions_of_at_most_region_max_size():
    assert reservation_sizes(_board(0)) == []
    assert reservation_sizes(_board(1 << 30)) == [512 << 20] * 2
    assert reservation_sizes(_board(700 << 20)) == [350 << 20] * 2
    assert reservation_sizes(_board(100 << 20 | 1)) == [102 << 20]  # rounded up to 2 MiB
    assert reservation_sizes(_board(1 << 20)) == [2 << 20]


def test_two_models_share_one_reservation_and_one_device_tree_reservation():
    b = _board(1 << 30)
    small, mid = plan_memory(model("0.5b"), b), plan_memory(model("1.5b"), b)
    fixed = reservation_regions(b)
    for plan in (small, mid):
        assert plan.regions + plan.spare == tuple(
            replace(r, used=x.used) for r, x in zip(fixed, plan.regions + plan.spare)
        )
        assert plan.reserved_bytes == 1 << 30
        assert all(r.used <= r.size for r in plan.regions) and all(r.used == 0 for r in plan.spare)
    assert len(small.regions) == 1 and len(small.spare) == 1 and len(mid.regions) == 2 and not mid.spare

    def reg_lines(plan):  # what the kernel reserves: node names and reg, not the comments
        return [ln for ln in reserved_memory_dtsi(b, plan).splitlines() if not ln.strip().startswith(("//", "/*"))]

    assert reg_lines(small) == reg_lines(mid)
    assert "spare: part of the fixed reservation" in reserved_memory_dtsi(b, small)


def test_without_a_reservation_regions_follow_the_model():
    b = _board(0)
    plan = plan_memory(model("0.5b"), b)
    assert not plan.spare and plan.reserved_bytes == sum(r.size for r in plan.regions) < 1 << 30


def test_a_model_larger_than_the_reservation_is_a_fit_error():
    with pytest.raises(
        FitError, match=r"does not fit kv260's fixed reservation of 1 region\(s\) of 256 MiB.*reserve more"
    ):
        plan_memory(model("0.5b"), _board(256 << 20))  # 0.5b needs more than 256 MiB


def test_a_reservation_beyond_the_board_budget_is_a_fit_error():
    with pytest.raises(FitError, match="does not fit kv260"):
        plan_memory(model("0.5b"), _board(3 << 30))  # half of 4 GiB is allowed
