"""Root runs only what it verified (issue 33, the board side): q25-ota.sh under BusyBox sh with
only BusyBox applets on PATH, driven through the real Mender client's state order
(ota_helpers.mender_install), against a scratch root standing in for the board's. Whoever can
write the install dir (the deploy user) plants a q25tok, a foreign region, a FIFO or a
directory; none of it runs as root, nothing outside our regions is written, nothing blocks,
and a step that could not do its work fails."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, make_board, mender_install, package, reserve, resident, sh
from sparse_files import written
from test_ota_board_regions import fail_next_load


@pytest.fixture(scope="module")
def arts(tmp_path_factory, ota_builds) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("root-artifacts")
    return {
        "A": package(ota_builds["A"], "mender", d / "a.mender"),
        "B": package(ota_builds["B"], "mender", d / "b.mender"),
    }


def ok(runs) -> str:
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    return "".join(r.stderr for r in runs)


def board_with_a(tmp_path: Path, bb: str, q25tok: Path, ota_builds, arts) -> Path:
    board = make_board(tmp_path / "board", q25tok, ota_builds["A"])
    ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    return board


def current_id(board: Path) -> str:
    return json.loads((board / INSTALL / ".q25deploy-state.json").read_text())["current"]


def plant_q25tok(board: Path, rid: str) -> Path:
    """What the deploy user can do: a q25tok in releases/<rid>/, listed in its release.json with
    its real digest (so the release still verifies). Run, it leaves `board/ran-as-root`."""
    marker = board / "ran-as-root"
    rel = board / INSTALL / "releases" / rid
    q = rel / "q25tok"
    q.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexec {board}/usr/bin/q25tok "$@"\n')
    q.chmod(0o755)
    data = q.read_bytes()
    rj = rel / "release.json"
    record = json.loads(rj.read_text())
    record["files"] = sorted(
        [*record["files"], {"path": "q25tok", "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}],
        key=lambda f: f["path"],
    )
    rj.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return marker


def test_a_rollback_runs_no_q25tok_of_the_release_it_returns_to(tmp_path, busybox_path, q25tok_bin, ota_builds, arts):
    """Issue 33 (1): ArtifactRollback ran the old release's q25tok (`regions load`) as root
    without hashing it: one planted in releases/<old>/ and listed in its release.json ran on a
    rolled-back update. The rollback loads the old partitions with the image's q25tok."""
    bb = busybox_path
    board = board_with_a(tmp_path, bb, q25tok_bin, ota_builds, arts)
    old = current_id(board)
    marker = plant_q25tok(board, old)
    fail_next_load(board)  # B's load fails: the engine rolls back to A
    runs = mender_install(bb, board, arts["B"], tmp_path / "tree")
    assert [r.args[2] for r in runs[2:]] == ["ArtifactInstall", "ArtifactRollback", "Cleanup"]
    assert runs[2].returncode != 0 and runs[3].returncode == 0, runs[3].stderr
    assert not marker.exists(), f"root ran the planted q25tok: {marker.read_text()}"
    assert current_id(board) == old and resident(board / "dev" / "mem", ota_builds["A"])
    assert f"load: the reserved regions hold the partitions of releases/{old}" in runs[3].stderr


def test_installing_the_current_release_again_runs_no_q25tok_of_it(
    tmp_path, busybox_path, q25tok_bin, ota_builds, arts
):
    """Issue 33 (1): the "already current" branch of an install (and the commit's smoke test)
    ran the current release's q25tok when the same artifact came a second time."""
    bb = busybox_path
    board = board_with_a(tmp_path, bb, q25tok_bin, ota_builds, arts)
    marker = plant_q25tok(board, current_id(board))
    (board / INSTALL / ".q25deploy-loaded").unlink()  # anyone who writes the install dir can
    mem = board / "dev" / "mem"
    size = mem.stat().st_size
    os.truncate(mem, 0)  # a reboot's DDR: all zeros again, and sparse (the file spans 5 GiB of addresses)
    os.truncate(mem, size)
    log = ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    assert "is already current" in log and "smoke test passed" in log
    assert not marker.exists(), f"root ran the planted q25tok: {marker.read_text()}"
    assert resident(board / "dev" / "mem", ota_builds["A"])


def foreign_payload(tree: Path) -> str:
    """A payload whose region is a foreign reservation: the plan's region lines and the release's
    region table name rproc@<base> (digests made to match, as a tampered build would have them)."""
    files = tree / "files"
    plan = (files / "q25-plan").read_text()
    node = re.search(r"^region (\S+) ", plan, flags=re.M).group(1)  # type: ignore[union-attr]
    foreign = "rproc@" + node.split("@")[1]
    sha, size, name = re.search(r"^file (\S+) (\S+) (\S+) partitions/regions\.tab$", plan, flags=re.M).groups()  # type: ignore[union-attr]
    table = (files / name).read_text().replace(node, foreign)
    (files / name).write_text(table)
    new_sha = hashlib.sha256(table.encode()).hexdigest()
    plan = plan.replace(f"file {sha} {size} {name} ", f"file {new_sha} {len(table.encode())} {name} ")
    (files / "q25-plan").write_text(plan.replace(f"region {node} ", f"region {foreign} "))
    rj = json.loads((files / "release.json").read_text())
    for f in rj["files"]:
        if f["path"] == "partitions/regions.tab":
            f["sha256"], f["size"] = new_sha, len(table.encode())
    (files / "release.json").write_text(json.dumps(rj, indent=2, sort_keys=True) + "\n")
    return foreign


def test_a_region_that_is_not_ours_is_refused_before_anything_is_staged(
    tmp_path, busybox_path, q25tok_bin, ota_builds, arts
):
    """Issue 33 (4): the script (and q25tok load) asked only whether the node was reserved
    no-map, so an install wrote its partition over a foreign reservation (rproc@…) and
    committed. A region must be q25-region<N>@<its base>: refused before staging."""
    bb = busybox_path
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    region = json.loads((ota_builds["A"] / "partition_map.json").read_text())["regions"][0]
    reserve(board / "proc" / "device-tree", [{**region, "node": f"rproc@{region['base']:x}"}])  # the board's own
    seen = []
    runs = mender_install(bb, board, arts["A"], tmp_path / "tree", edit=lambda t: seen.append(foreign_payload(t)))
    install = runs[2]
    assert install.args[2] == "ArtifactInstall" and install.returncode != 0
    assert f"refusing region '{seen[0]}' in the plan: not a q25deploy region" in install.stderr, install.stderr
    assert not written(board / "dev" / "mem"), "the foreign reservation was written"
    assert layout(board) == {}


def test_a_fifo_for_the_state_file_does_not_block_the_update(tmp_path, busybox_path, q25tok_bin, ota_builds, arts):
    """Issue 33 (5), the script's side: root never opens what could block. A FIFO planted for
    the state file held the install in its first read (sh()'s timeout); now refused at once."""
    bb = busybox_path
    board = board_with_a(tmp_path, bb, q25tok_bin, ota_builds, arts)
    state = board / INSTALL / ".q25deploy-state.json"
    state.unlink()
    os.mkfifo(state)
    runs = mender_install(bb, board, arts["B"], tmp_path / "tree")
    assert runs[2].returncode != 0 and "not a regular file" in runs[2].stderr, runs[2].stderr


def test_a_load_stamp_that_cannot_be_written_fails_the_step(tmp_path, busybox_path, q25tok_bin, ota_builds, arts):
    """Issue 33 (10): a directory planted at .q25deploy-loaded made the stamp write fail silently
    and every state exit 0. The install fails, saying why, and the engine rolls back."""
    bb = busybox_path
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    (board / INSTALL / ".q25deploy-loaded").mkdir(parents=True)
    runs = mender_install(bb, board, arts["A"], tmp_path / "tree")
    install = runs[2]
    assert install.args[2] == "ArtifactInstall" and install.returncode != 0, install.stderr
    assert ".q25deploy-loaded" in install.stderr
    assert runs[3].args[2] == "ArtifactRollback"
    r = sh(bb, board, "install", str(tmp_path / "tree" / "files"))  # by hand: the same
    assert r.returncode != 0 and ".q25deploy-loaded" in r.stderr
