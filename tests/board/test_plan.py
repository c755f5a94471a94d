from __future__ import annotations

from dataclasses import replace

import pytest
from tensor_dirs import model

from q25deploy.board.boardfile import load_board
from q25deploy.board.plan import assemble, check_placement, free_windows, place_regions, plan_memory, plan_partitions
from q25deploy.errors import FitError
from q25deploy.resources import data_dir

TARGETS = data_dir("targets")


@pytest.mark.parametrize("board", ["kv260", "zcu104", "qemu"])
def test_every_tensor_is_placed_aligned_inside_its_region(board):
    b = load_board(TARGETS / f"{board}.toml")
    b = replace(b, layout=replace(b.layout, region_max_size=64 << 20))  # force several regions
    tensors = model("0.5b")
    plan = plan_memory(tensors, b)
    assert len(plan.regions) > 3 and len(plan.tensors) == len(tensors)
    assert [p.name for p in plan.tensors] == [t.name for t in sorted(tensors, key=lambda t: t.data_offset)]
    for p in plan.tensors:
        r = plan.regions[p.region]
        assert p.offset % b.layout.tensor_alignment == 0 and p.offset + p.nbytes <= r.used <= r.size
    for r in plan.regions:
        assert r.base % (2 << 20) == 0 and r.size % (2 << 20) == 0
        assert any(k.base <= r.base and r.end <= k.end for k in b.banks)
        assert not any(x.base < r.end and r.base < x.end for x in b.reserved)
    spans = sorted((r.base, r.end) for r in plan.regions)
    assert all(a[1] <= c[0] for a, c in zip(spans, spans[1:]))
    placed = {}
    for p in plan.tensors:  # no two tensors overlap
        for a, e in placed.get(p.region, []):
            assert p.offset >= e or p.offset + p.nbytes <= a
        placed.setdefault(p.region, []).append((p.offset, p.offset + p.nbytes))


def test_plan_is_deterministic():
    b = load_board(TARGETS / "kv260.toml")
    assert plan_memory(model("1.5b"), b) == plan_memory(list(reversed(model("1.5b"))), b)


def test_kv260_prefers_the_high_bank_and_avoids_reservations():
    b = load_board(TARGETS / "kv260.toml")
    plan = plan_memory(model("1.5b"), b)
    assert all(r.bank == "ddr-high" for r in plan.regions)
    windows = free_windows(b)
    assert windows[0].base == 0x800000000 and windows[1].end == 0x7FE00000  # below the PMU, 2 MiB aligned


def test_fit_errors_say_needed_and_available():
    with pytest.raises(FitError) as e:
        plan_memory(model("7b"), load_board(TARGETS / "zcu104.toml"))
    msg = str(e.value)
    assert "does not fit zcu104" in msg and "allows 1,073,741,824 bytes" in msg and "needs 4," in msg
    with pytest.raises(FitError, match="does not fit kv260"):  # 4.4 GiB > half of 4 GiB
        plan_memory(model("7b"), load_board(TARGETS / "kv260.toml"))
    plan = plan_memory(model("3b"), load_board(TARGETS / "kv260.toml"))  # 1.8 GiB fits the 2 GiB budget
    assert plan.reserved_bytes <= 2 << 30


def test_fragmented_memory_is_a_fit_error():
    b = load_board(TARGETS / "zcu104.toml")
    b = replace(b, layout=replace(b.layout, region_max_size=4 << 30, max_model_share=1.0))
    with pytest.raises(FitError, match="largest free window"):  # 1.8 GiB in one piece; ~1 GiB free
        plan_memory(model("3b"), b)


def test_a_tensor_larger_than_region_max_gets_its_own_region():
    b = load_board(TARGETS / "kv260.toml")
    b = replace(b, layout=replace(b.layout, region_max_size=32 << 20))
    plan = plan_memory(model("0.5b"), b)
    emb = next(p for p in plan.tensors if p.name == "token_embd.weight")
    assert emb.nbytes > 32 << 20 and emb.offset == 0
    assert [p.name for p in plan.tensors if p.region == emb.region] == ["token_embd.weight"]


def test_an_unsound_partition_plan_from_a_plugin_is_refused():
    """The build's partition digests come from the plan: a plan that overlaps, skips, repeats or
    misaligns tensors must never reach the copy."""
    board = load_board(TARGETS / "kv260.toml")
    tensors = model("tiny")
    good = plan_partitions(tensors, board)
    check_placement(good, tensors, board.layout.tensor_alignment)
    p0 = good[0]
    (t0, o0), (t1, _o1) = p0.items[0], p0.items[1]
    bad = {
        "overlap": replace(p0, items=((t0, o0), (t1, o0)) + p0.items[2:]),
        "misaligned": replace(p0, items=((t0, o0 + 1),) + p0.items[1:]),
        "past the end": replace(p0, used=o0 + t0.nbytes - 1, items=((t0, o0),) + p0.items[1:]),
        "twice": replace(p0, items=p0.items + ((t0, p0.used),)),
        "missing": replace(p0, items=p0.items[1:]),
    }
    for part in bad.values():
        with pytest.raises(FitError, match="unsound"):
            check_placement([part, *good[1:]], tensors, board.layout.tensor_alignment)
        with pytest.raises(FitError):
            assemble([part, *good[1:]], place_regions(board, good), board, tensors)


def test_regions_on_reserved_or_missing_memory_are_refused():
    board = load_board(TARGETS / "kv260.toml")
    tensors = model("tiny")
    parts = plan_partitions(tensors, board)
    regions = place_regions(board, parts)
    on_reserved = replace(regions[0], base=board.reserved[0].base // 4096 * 4096)
    outside = replace(regions[0], base=0x10_0000_0000_0000)
    for r in (on_reserved, outside):
        with pytest.raises(FitError, match="memory banks|overlaps kv260's reserved"):
            assemble(parts, [r, *regions[1:]], board, tensors)
