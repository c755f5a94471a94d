"""The board script and the reserved regions (q25-ota.sh under BusyBox sh, as in
test_ota_board.py): a full release is refused before staging when the running device tree
(``Q25_ROOT/proc/device-tree``) does not reserve its regions; after the switch `q25tok load`
copies its partitions into ``Q25_ROOT/dev/mem`` (a sparse file standing in for physical
memory), the commit's smoke test reads them back, a tokenizer-only update keeps them, and a
failed load or smoke test rolls back and loads the previous release's partitions again."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ota_helpers import (
    INSTALL,
    layout,
    make_board,
    mender_install,
    mender_tree,
    package,
    reserve,
    resident,
    sh,
    swupdate_install,
)


@pytest.fixture(scope="module")
def arts(tmp_path_factory, ota_builds) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("region-artifacts")
    return {
        "A": package(ota_builds["A"], "mender", d / "a.mender"),
        "B": package(ota_builds["B"], "mender", d / "b.mender"),
        "A2-tok": package(ota_builds["A2"], "mender", d / "a2-tok.mender", "--tokenizer-only"),
        "B-swu": package(ota_builds["B"], "swupdate", d / "b.swu"),
        "A-allow": package(ota_builds["A"], "mender", d / "a-allow.mender", "--allow-unreserved"),
    }


def regions_of(build: Path) -> list[dict]:
    return json.loads((build / "partition_map.json").read_text())["regions"]


def ok(runs) -> str:
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    return "".join(r.stderr for r in runs)


def stamp(board: Path) -> str:
    return (board / INSTALL / ".q25deploy-loaded").read_text()


def fail_next_load(board: Path) -> None:
    """The board's next `q25tok load` cannot map its memory (the real q25tok, given a memory
    device that is not there): it fails as a load on a board whose /dev/mem refuses it."""
    real = board / "usr" / "bin" / "q25tok.real"
    (board / "usr" / "bin" / "q25tok").rename(real)
    flag = board / "fail-next-load"
    flag.write_text("")
    q = board / "usr" / "bin" / "q25tok"
    q.write_text(
        f'#!/bin/sh\nif [ "$1" = load ] && [ -f {flag} ]; then rm -f {flag}; q=$1; shift\n'
        f'  exec {real} "$q" "$@" --mem {board}/no-such-memory; fi\nexec {real} "$@"\n'
    )
    q.chmod(0o755)


def test_each_release_becomes_resident_and_a_tokenizer_only_update_keeps_the_regions(
    tmp_path, bb, q25tok_bin, ota_builds, arts
):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    mem = board / "dev" / "mem"
    log = ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    assert resident(mem, ota_builds["A"]) and " loaded\n" in log and "verify: the reserved regions hold" in log
    log = ok(mender_install(bb, board, arts["B"], tmp_path / "tree"))
    assert resident(mem, ota_builds["B"]) and not resident(mem, ota_builds["A"])
    loaded, written = stamp(board), mem.stat().st_mtime_ns
    log = ok(mender_install(bb, board, arts["A2-tok"], tmp_path / "tree"))  # same region table: kept
    assert (
        "already hold the partitions" in log and " loaded\n" not in log and "verify: the reserved regions hold" in log
    )
    assert mem.stat().st_mtime_ns == written and stamp(board) == loaded and resident(mem, ota_builds["B"])


@pytest.mark.parametrize("why", ["absent", "reserves another range", "not no-map"])
def test_a_plan_the_device_tree_does_not_reserve_is_refused_before_staging(
    tmp_path, bb, q25tok_bin, ota_builds, arts, why
):
    board = make_board(tmp_path / "board", q25tok_bin)  # no regions reserved
    regions = regions_of(ota_builds["A"])
    if why == "reserves another range":
        reserve(board / "proc" / "device-tree", [{**r, "size": r["size"] // 2} for r in regions])
    elif why == "not no-map":
        reserve(board / "proc" / "device-tree", regions, no_map=False)
    runs = mender_install(bb, board, arts["A"], tmp_path / "tree")
    assert [r.args[2] for r in runs[2:]] == ["ArtifactInstall", "ArtifactRollback", "Cleanup"]
    err = runs[2].stderr.strip()
    r = regions[0]
    assert err.startswith("q25-ota: refusing release ") and err.count("\n") == 0, err
    assert f"({r['node']} [{r['base']:#x}, {r['base'] + r['size']:#x}) {why})" in err
    assert "does not reserve 1 of the release's 1 region(s)" in err and "reserved-memory.dtsi" in err
    assert err.endswith("nothing was staged") and layout(board) == {}
    # SWUpdate: the update fails the same way, nothing left behind
    r = swupdate_install(bb, board, package(ota_builds["B"], "swupdate", tmp_path / "b.swu"))
    assert r.returncode != 0 and "refusing release" in r.stderr
    assert [k for k, v in layout(board).items() if v[0] != "dir"] == []


def test_the_packager_may_allow_an_unreserved_plan(tmp_path, bb, q25tok_bin, ota_builds, arts):
    """`package --allow-unreserved` (the board gets its new image later): installed with a
    warning, its partitions not loaded; the check is the plan's, not the board's choice."""
    board = make_board(tmp_path / "board", q25tok_bin)
    log = ok(mender_install(bb, board, arts["A-allow"], tmp_path / "tree"))
    assert "warning: the board's /proc/device-tree/reserved-memory does not reserve 1" in log
    assert "not in reserved memory" in log and "smoke test passed" in log
    assert not (board / INSTALL / ".q25deploy-loaded").exists()
    tree = mender_tree(arts["A-allow"], tmp_path / "tree")  # the plan's word, edited: refused again
    plan = tree / "files" / "q25-plan"
    plan.write_text(plan.read_text().replace("unreserved allow\n", "unreserved maybe\n"))
    assert "bad unreserved" in sh(bb, board, "ArtifactInstall", str(tree)).stderr


def test_region_lines_are_checked_and_a_tokenizer_only_plan_has_none(tmp_path, bb, q25tok_bin, ota_builds, arts):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    before = layout(board)
    node = regions_of(ota_builds["A"])[0]["node"]
    for art, pattern, repl in (
        ("B", r"^region (\S+)", "region ../../etc"),
        ("B", r"^(region \S+ )\S+", r"\g<1>0x1"),
        ("B", r"^(region .*)$", r"\1 extra"),
        ("B", r"^memory .*$", "memory /lib/firmware/q25/mem"),
        ("B", r"^device_tree .*$", "device_tree ../proc"),
        ("A2-tok", r"^(image .*)$", rf"\1\nregion {node} 0000000000000000 0000000000001000"),
    ):
        tree = mender_tree(arts[art], tmp_path / "tree")
        plan = tree / "files" / "q25-plan"
        text, n = re.subn(pattern, repl, plan.read_text(), flags=re.M)
        assert n, pattern
        plan.write_text(text)
        r = sh(bb, board, "ArtifactInstall", str(tree))
        assert r.returncode != 0 and "plan" in r.stderr, (pattern, r.stderr)
        assert layout(board) == before, pattern


def test_a_failed_load_fails_the_update_and_the_rollback_loads_the_old_release(
    tmp_path, bb, q25tok_bin, ota_builds, arts
):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    mem = board / "dev" / "mem"
    ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    before, loaded = layout(board), stamp(board)
    fail_next_load(board)
    runs = mender_install(bb, board, arts["B"], tmp_path / "tree")
    assert [r.args[2] for r in runs[2:]] == ["ArtifactInstall", "ArtifactRollback", "Cleanup"]
    assert runs[2].returncode != 0 and "q25tok load failed on releases/" in runs[2].stderr
    assert "cannot map" in runs[2].stderr and runs[3].returncode == 0
    assert "rolled back to" in runs[3].stderr and " loaded\n" in runs[3].stderr  # A's partitions again
    assert layout(board) == before and stamp(board) == loaded and resident(mem, ota_builds["A"])


def test_a_failed_residency_check_at_commit_rolls_back_and_reloads(tmp_path, bb, q25tok_bin, ota_builds, arts):
    """B loads, then a bit of its region flips (DDR): the commit's `q25tok verify` fails,
    Mender calls ArtifactRollback, and A's partitions are loaded again; SWUpdate's post-install
    does the same in one run."""
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    mem = board / "dev" / "mem"
    ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    before = layout(board)
    tree = mender_tree(arts["B"], tmp_path / "tree")
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    assert resident(mem, ota_builds["B"])
    r0 = regions_of(ota_builds["B"])[0]
    with open(mem, "r+b") as f:
        f.seek(r0["base"] + r0["used"] // 2)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 4]))
    commit = sh(bb, board, "ArtifactCommit", str(tree))
    assert commit.returncode != 0 and "q25tok verify failed" in commit.stderr and "MISMATCH" in commit.stderr
    back = sh(bb, board, "ArtifactRollback", str(tree))
    assert back.returncode == 0 and " loaded\n" in back.stderr
    assert sh(bb, board, "Cleanup", str(tree)).returncode == 0
    assert {k: v for k, v in layout(board).items() if k != ".q25deploy-loaded"} == {
        k: v for k, v in before.items() if k != ".q25deploy-loaded"
    }
    assert resident(mem, ota_builds["A"])
    # SWUpdate: the load fails in its post-install, which rolls back and reloads by itself
    fail_next_load(board)
    r = swupdate_install(bb, board, arts["B-swu"])
    assert r.returncode != 0 and "q25tok load failed" in r.stderr and "rolled back to" in r.stdout
    assert resident(mem, ota_builds["A"])


def test_a_rollback_to_a_release_the_device_tree_does_not_reserve_is_a_warning(
    tmp_path, bb, q25tok_bin, ota_builds, arts
):
    """A was installed unreserved (`--allow-unreserved`); B's plan refuses that, and its commit
    fails because the reservation is gone by then: the rollback to A, whose partitions were not
    resident before either, warns instead of failing."""
    import shutil

    board = make_board(tmp_path / "board", q25tok_bin)
    ok(mender_install(bb, board, arts["A-allow"], tmp_path / "tree"))
    before = layout(board)
    reserve(board / "proc" / "device-tree", regions_of(ota_builds["B"]))
    os.truncate(board / "dev" / "mem", max(r["base"] + r["size"] for r in regions_of(ota_builds["B"])))
    tree = mender_tree(arts["B"], tmp_path / "tree")
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    shutil.rmtree(board / "proc" / "device-tree" / "reserved-memory")
    commit = sh(bb, board, "ArtifactCommit", str(tree))
    assert commit.returncode != 0 and "REFUSED" in commit.stderr
    back = sh(bb, board, "ArtifactRollback", str(tree))
    assert back.returncode == 0 and "warning: the running device tree does not reserve" in back.stderr, back.stderr
    assert sh(bb, board, "Cleanup", str(tree)).returncode == 0
    assert {k: v for k, v in layout(board).items() if k != ".q25deploy-loaded"} == before
