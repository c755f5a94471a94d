"""The board side (q25-ota.sh) under BusyBox sh with only BusyBox applets on PATH, against
a directory standing in for the board's root and q25tok built from our C sources: the
Mender update-module states and SWUpdate's post-install give the on-board layout and state
file of `q25deploy deploy` (compared with a real deploy through sshd), tokenizer-only
updates give deploy's release id, and a failing smoke test rolls back. Fast unit tests of the
script: the real Mender and SWUpdate clients run it in test_ota_real_mender.py and
test_ota_real_swupdate.py."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, make_board, mender_install, mender_tree, package, sh, swupdate_install
from release_modes import wrong_modes

from q25deploy.cli import main


def test_mender_module_full_then_tokenizer_only_matches_deploy(tmp_path, capsys, bb, q25tok_bin, ota_builds):
    pkg = tmp_path / "pkg"
    a = package(ota_builds["A"], "mender", pkg / "a.mender")
    b_tok = package(ota_builds["A2"], "mender", pkg / "a2-tok.mender", "--tokenizer-only")
    b = package(ota_builds["B"], "mender", pkg / "b.mender")
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    for art in (a, b_tok, b):
        runs = mender_install(bb, board, art, tmp_path / "tree")
        assert all(r.returncode == 0 for r in runs), [(r.args[-2:], r.stderr) for r in runs]
        assert "smoke test passed" in "".join(r.stderr for r in runs)
        assert (
            not (board / INSTALL / ".q25-ota").exists()
            and not (board / INSTALL / "releases" / ".incoming-ota").exists()
        )
        if art == b_tok:
            after_tok = layout(board)
    deployed = _deploy_sequence(tmp_path, capsys, q25tok_bin, ota_builds)
    if deployed is None:
        pytest.skip("sshd is needed to compare with a real deploy (CI runs it)")
    layouts, deployed_root = deployed
    assert after_tok == layouts[0]  # same release id, files, links, state as deploy --tokenizer-only
    assert layout(board) == layouts[1]
    state = json.loads((board / INSTALL / ".q25deploy-state.json").read_text())
    assert (
        state["previous"] and len(state["releases"]) == 2 and all(r["deployed_at"] for r in state["releases"].values())
    )
    # a board deploy updated (its state records the forward passes it passed) takes the engine's update
    deployed_state = json.loads((deployed_root / INSTALL / ".q25deploy-state.json").read_text())
    assert "forward" in deployed_state["releases"][deployed_state["current"]], deployed_state
    runs = mender_install(bb, deployed_root, a, tmp_path / "tree")
    assert all(r.returncode == 0 for r in runs), "\n".join(f"{r.args[-2]}: {r.stderr}" for r in runs)
    assert "smoke test passed" in "".join(r.stderr for r in runs)


def _deploy_sequence(tmp_path, capsys, q25tok_bin, builds):
    """deploy A, deploy --tokenizer-only A2, deploy B through a real sshd: layouts after 2 and 3,
    and the board's root."""
    if not Path("/usr/sbin/sshd").exists() or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must provide sshd and root for the deploy comparison")
        return None
    from sshd import SSHServer, keygen

    key = keygen(tmp_path / "client_ed25519")
    srv = SSHServer(tmp_path / "sshd", key)
    try:
        root = make_board(tmp_path / "deployed", q25tok_bin, builds["A"])
        board_file = tmp_path / "qemu-here.toml"  # the qemu board, but of this machine's arch (no --runtime-bin)
        text = (Path(__file__).resolve().parents[2] / "targets" / "qemu.toml").read_text()
        # the same stand-in device tree and memory as the OTA board's: deploy loads the regions too
        text = text.replace(
            'arch = "aarch64"',
            f'arch = "{platform.machine()}"\ndevice_tree = "{root}/proc/device-tree"\nmemory_device = "{root}/dev/mem"',
        )
        # the board's q25tok is not under --remote-root (only the install directory is): say where it is
        text = text.replace(
            'path = "/lib/firmware/q25"', f'path = "/lib/firmware/q25"\nruntime = "{root}/usr/bin/q25tok"'
        )
        board_file.write_text(text)
        kh = srv.known_hosts(tmp_path / "known_hosts")
        out = []
        for build, extra in ((builds["A"], []), (builds["A2"], ["--tokenizer-only"]), (builds["B"], [])):
            argv = [
                "deploy",
                "--target",
                "qemu",
                "--target-file",
                str(board_file),
                "--host",
                f"root@127.0.0.1:{srv.port}",
                "--build",
                str(build),
                "--identity",
                str(key),
                "--known-hosts",
                str(kh),
                "--remote-root",
                str(root),
                "--json",
                *extra,
            ]
            capsys.readouterr()
            assert main(argv) == 0, capsys.readouterr()
            out.append(layout(root))
        return out[1:], root
    finally:
        srv.stop()


def test_swupdate_postinstall_matches_the_mender_module(tmp_path, bb, q25tok_bin, ota_builds, keys):
    swu = package(ota_builds["A"], "swupdate", tmp_path / "a.swu")
    art = package(ota_builds["A"], "mender", tmp_path / "a.mender")
    sw_board = make_board(tmp_path / "sw", q25tok_bin, ota_builds["A"])
    r = swupdate_install(bb, sw_board, swu)
    assert r.returncode == 0 and "smoke test passed" in r.stdout and r.stderr == "", r.stderr  # progress: stdout
    assert not (sw_board / INSTALL / ".q25-ota-incoming").exists()
    m_board = make_board(tmp_path / "m", q25tok_bin, ota_builds["A"])
    assert all(x.returncode == 0 for x in mender_install(bb, m_board, art, tmp_path / "tree"))
    assert layout(sw_board) == layout(m_board)
    rid = json.loads((sw_board / INSTALL / "current" / "release.json").read_text())["id"]
    assert os.readlink(sw_board / INSTALL / "current") == f"releases/{rid}"
    # the same again: already current, nothing changes
    before = layout(sw_board)
    r = swupdate_install(bb, sw_board, swu)
    assert r.returncode == 0 and "already current" in r.stdout and layout(sw_board) == before


def test_failing_smoke_test_rolls_back(tmp_path, bb, q25tok_bin, ota_builds):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    a = package(ota_builds["A"], "mender", tmp_path / "a.mender")
    assert all(r.returncode == 0 for r in mender_install(bb, board, a, tmp_path / "tree"))
    state_before = (board / INSTALL / ".q25deploy-state.json").read_bytes()
    before = layout(board)
    real = board / "usr" / "bin" / "q25tok.real"
    (board / "usr" / "bin" / "q25tok").rename(real)
    wrong = board / "usr" / "bin" / "q25tok"  # info works, encode gives wrong ids
    wrong.write_text(f'#!/bin/sh\nif [ "$1" = encode ]; then echo 1 2 3; exit 0; fi\nexec {real} "$@"\n')
    wrong.chmod(0o755)
    runs = mender_install(bb, board, package(ota_builds["B"], "mender", tmp_path / "b.mender"), tmp_path / "tree")
    states = [r.args[2] for r in runs]
    assert states[-3:] == ["ArtifactCommit", "ArtifactRollback", "Cleanup"] and runs[-3].returncode != 0
    assert "board ids differ" in runs[-3].stderr and runs[-2].returncode == 0
    assert layout(board) == before and (board / INSTALL / ".q25deploy-state.json").read_bytes() == state_before
    # SWUpdate's post-install rolls back by itself and fails the update
    r = swupdate_install(bb, board, package(ota_builds["B"], "swupdate", tmp_path / "b.swu"))
    assert r.returncode != 0 and "rolled back" in r.stderr and layout(board) == before


def test_tokenizer_only_with_another_vocabulary_is_refused(tmp_path, bb, q25tok_bin, ota_builds):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    c_tok = package(ota_builds["C"], "mender", tmp_path / "c.mender", "--tokenizer-only")
    runs = mender_install(bb, board, c_tok, tmp_path / "tree")  # nothing deployed yet
    assert runs[2].returncode != 0 and "install a full release" in runs[2].stderr
    assert all(
        r.returncode == 0
        for r in mender_install(bb, board, package(ota_builds["A"], "mender", tmp_path / "a.mender"), tmp_path / "tree")
    )
    before = layout(board)
    runs = mender_install(bb, board, c_tok, tmp_path / "tree")
    assert runs[2].args[2] == "ArtifactInstall" and runs[2].returncode != 0
    assert "vocabulary fingerprint" in runs[2].stderr and layout(board) == before


def test_unknown_states_and_queries_do_nothing(tmp_path, bb):
    for state in ("ArtifactReboot", "ArtifactVerifyReboot", "SomeFutureQuery"):
        r = sh(bb, tmp_path, state, str(tmp_path))
        assert r.returncode == 0 and r.stdout == ""
    assert sh(bb, tmp_path, "NeedsArtifactReboot", str(tmp_path)).stdout.strip() == "No"


def test_rollback_keeps_a_release_it_did_not_create(tmp_path, bb, q25tok_bin, ota_builds):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    a = package(ota_builds["A"], "mender", tmp_path / "a.mender")
    b = package(ota_builds["B"], "mender", tmp_path / "b.mender")
    for art in (a, b):
        assert all(r.returncode == 0 for r in mender_install(bb, board, art, tmp_path / "tree"))
    before = layout(board)  # current B, previous A (kept)
    tree = mender_tree(a, tmp_path / "tree")  # back to A, whose directory is already there
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    state = json.loads((board / INSTALL / ".q25deploy-state.json").read_text())
    assert os.readlink(board / INSTALL / "current") == f"releases/{state['current']}" and state["previous"]
    assert sh(bb, board, "ArtifactRollback", str(tree)).returncode == 0  # e.g. the commit failed
    assert sh(bb, board, "Cleanup", str(tree)).returncode == 0
    assert layout(board) == before


def test_a_crafted_plan_cannot_leave_the_install_dir(tmp_path, bb, q25tok_bin, ota_builds):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    tree = mender_tree(package(ota_builds["A"], "mender", tmp_path / "a.mender"), tmp_path / "tree")
    plan = tree / "files" / "q25-plan"
    plan.write_text(plan.read_text().replace(" partition_map.json\n", " ../../../../etc/evil\n"))
    r = sh(bb, board, "ArtifactInstall", str(tree))
    assert r.returncode != 0 and "unsafe path" in r.stderr
    assert not (board / "etc").exists() and not (board / INSTALL / "current").exists()


def test_a_release_from_0600_payload_files_gets_the_one_mode(tmp_path, bb, q25tok_bin, ota_builds):
    """The Mender client's file tree and SWUpdate's rawfile handler write 0600 files (the real
    clients: test_ota_real_*.py); the release still gets deploy's modes, under any umask."""
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    tree = mender_tree(package(ota_builds["A"], "mender", tmp_path / "a.mender"), tmp_path / "tree")
    for f in (tree / "files").iterdir():
        f.chmod(0o600)
    old_umask = os.umask(0o077)
    try:
        assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    finally:
        os.umask(old_umask)
    release = board / INSTALL / "current"
    assert wrong_modes(release.resolve()) == {}


@pytest.mark.parametrize("damage", ["truncated", "missing", "release_json"])
def test_a_kept_copy_of_the_release_that_does_not_verify_is_replaced(tmp_path, bb, q25tok_bin, ota_builds, damage):
    """What a power cut leaves of a prune's ``rm -rf`` (issue 24): releases/<A> half removed,
    not current; installing A again replaces it with the verified staging, not fails forever."""
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    a = package(ota_builds["A"], "mender", tmp_path / "a.mender")
    b = package(ota_builds["B"], "mender", tmp_path / "b.mender")
    assert all(r.returncode == 0 for r in mender_install(bb, board, a, tmp_path / "tree"))
    good = layout(board)
    assert all(r.returncode == 0 for r in mender_install(bb, board, b, tmp_path / "tree"))
    state = json.loads((board / INSTALL / ".q25deploy-state.json").read_text())
    kept = board / INSTALL / "releases" / state["previous"]  # A, kept beside B
    part = sorted((kept / "partitions").glob("region_*.bin"))[0]
    if damage == "truncated":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    elif damage == "missing":
        part.unlink()
    else:  # a release.json that lists less than the release has
        doc = json.loads((kept / "release.json").read_text())
        doc["files"] = [f for f in doc["files"] if not f["path"].startswith("partitions/")]
        (kept / "release.json").write_text(json.dumps(doc))
    runs = mender_install(bb, board, a, tmp_path / "tree")
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert any("does not verify" in r.stderr + r.stdout for r in runs), [r.stderr for r in runs]
    after = layout(board)
    rid_a = state["previous"]
    assert after["current"] == ("link", f"releases/{rid_a}") and after[".q25deploy-state.json"][1]["previous"]
    mine = lambda tree: {k: v for k, v in tree.items() if k.startswith(f"releases/{rid_a}")}  # noqa: E731
    assert mine(after) == mine(good)  # A whole again, byte for byte


def test_a_cut_between_the_switch_and_the_state_write_is_settled_by_the_next_install(
    tmp_path, bb, q25tok_bin, ota_builds
):
    """Found by the write-log campaign (issue 24; swupdate, seed 24019): the disk kept the
    switch of current to the new release and lost the state file's write after it. SWUpdate
    keeps no record of an interrupted update, so the board boots the new release with the old
    state; the next install finishes that switch from the state the install recorded before it
    (.q25-ota/state.new), says so, and goes on."""
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    a = mender_tree(package(ota_builds["A"], "mender", tmp_path / "a.mender"), tmp_path / "tree-a")
    b = mender_tree(package(ota_builds["B"], "mender", tmp_path / "b.mender"), tmp_path / "tree-b")
    assert sh(bb, board, "install", str(a / "files")).returncode == 0
    state = board / INSTALL / ".q25deploy-state.json"
    before = state.read_bytes()
    r = sh(bb, board, "install", str(b / "files"))
    assert r.returncode == 0, r.stderr
    new = os.readlink(board / INSTALL / "current").removeprefix("releases/")
    state.write_bytes(before)  # the crash state: the switch on the disk, the state write lost
    assert json.loads(state.read_text())["current"] != new
    r = sh(bb, board, "install", str(b / "files"))
    assert r.returncode == 0, r.stderr
    assert f"finished the switch to releases/{new} that an earlier install was cut in" in r.stderr, r.stderr
    doc = json.loads(state.read_text())
    assert doc["current"] == new and os.readlink(board / INSTALL / "current") == f"releases/{new}"
    assert doc["previous"] == json.loads(before)["current"]
    # a state.new that is not what the script wrote is refused, not copied into place
    state.write_bytes(before)
    (board / INSTALL / ".q25-ota" / "state.new").write_text('{"format": "q25deploy-board-state/1", "current": "x"}')
    r = sh(bb, board, "install", str(b / "files"))
    assert r.returncode != 0 and "is not what q25-ota wrote there" in r.stderr, r.stderr
    assert state.read_bytes() == before
