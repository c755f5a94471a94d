"""One owner per tree (issue 44, items 1 and 3, the board script): q25-ota.sh under BusyBox sh
with only BusyBox applets on PATH, driven through the real Mender client's state order
(ota_helpers.mender_install), against a scratch root standing in for the board's. The deploy
user is uid 65534: an install dir of theirs (a `deploy --become none` install), or a directory
of theirs above it, is refused by every step with the fix, and nothing is changed; root takes
no record of its own from a file it does not alone own with one name, in the state file's
format; and root chmods no file of the current release (a hard link to /etc/shadow's stand-in
kept its mode)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, make_board, mender_install, package, sh, swupdate_install

from q25deploy.common import json_bytes

DEPLOY_USER = 65534  # nobody: the deploy user of a `--become none` install


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, ota_builds) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("owner-artifacts")
    return {
        "A": package(ota_builds["A"], "mender", d / "a.mender"),
        "B": package(ota_builds["B"], "mender", d / "b.mender"),
        "B.swu": package(ota_builds["B"], "swupdate", d / "b.swu"),
        "A2-tok": package(ota_builds["A2"], "mender", d / "a2-tok.mender", "--tokenizer-only"),
        "reserving": ota_builds["A"],
    }


def installed(bb: str, tmp_path: Path, q25tok: Path, artifacts: dict[str, Path]) -> Path:
    """A board with artifact A installed through every Mender state (as root: the tree is root's)."""
    board = make_board(tmp_path / "board", q25tok, artifacts["reserving"])
    runs = mender_install(bb, board, artifacts["A"], tmp_path / "tree")
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    return board


def chown_tree(top: Path, uid: int) -> None:
    """Every entry of ``top`` the user's, as a deploy user's install dir is (a link itself, not
    its target; a file with a name elsewhere, a planted hard link, keeps its owner)."""
    for d, dirs, files in os.walk(top):
        os.lchown(d, uid, uid)
        for name in dirs + files:
            p = Path(d) / name
            if p.is_symlink() or p.is_dir() or p.stat().st_nlink == 1:
                os.lchown(p, uid, uid)


def snapshot(board: Path) -> dict:
    """Everything under the board's root: owner, mode, size, mtime (and a link's target), and the
    install dir's bytes (ota_helpers.layout)."""
    out = {"layout": layout(board)}
    for d, dirs, files in os.walk(board):
        for p in [Path(d), *(Path(d) / n for n in dirs + files)]:
            st = p.lstat()
            out[p.relative_to(board).as_posix()] = (
                st.st_uid,
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                os.readlink(p) if p.is_symlink() else None,
            )
    return out


def states(runs) -> list[str]:
    return [r.args[2] for r in runs[2:]]


# -- the ownership rule: refused with the fix, nothing changed --------------------------------------
def test_a_deploy_users_install_dir_is_refused_by_every_step(tmp_path, busybox_path, q25tok_bin, artifacts):
    """One install dir used both ways: the deploy user's (`deploy --become none`) install dir
    updated by root's Mender or SWUpdate. Before, root installed into it (and trusted what the
    user planted there); every step now refuses it, names the owner and the fix, changes nothing."""
    bb = busybox_path
    board = installed(bb, tmp_path, q25tok_bin, artifacts)
    base = board / INSTALL
    chown_tree(base, DEPLOY_USER)
    before = snapshot(board)
    runs = mender_install(bb, board, artifacts["B"], tmp_path / "tree")
    assert states(runs) == ["ArtifactInstall", "ArtifactRollback", "Cleanup"]
    for r in runs[2:]:
        assert r.returncode != 0, (r.args[2], r.stderr)
        assert r.stderr.strip().splitlines() == [
            f"q25-ota: {base} is owned by uid {DEPLOY_USER} (mode drwxr-xr-x), not by root who runs this: "
            "root installs only into a tree that is its own alone (one owner per tree): this install dir is "
            "another user's (a deploy --become none install?): use a separate install dir for OTA; if no one "
            f"else ever wrote there: chown -R root:root {base} && chmod -R go-w {base}"
        ], (r.args[2], r.stderr)
    smoke = sh(bb, board, "smoke", str(tmp_path / "tree" / "files"))  # by hand: the same
    assert smoke.returncode != 0 and f"{base} is owned by uid {DEPLOY_USER}" in smoke.stderr, smoke.stderr
    swu = swupdate_install(bb, board, artifacts["B.swu"])  # SWUpdate's preinst, before its files handler
    assert swu.returncode != 0 and f"{base} is owned by uid {DEPLOY_USER}" in swu.stderr, swu.stderr
    assert snapshot(board) == before


@pytest.mark.parametrize(
    "case",
    ["group-writable releases", "a deploy user's directory above", "a world-writable directory above"],
)
def test_a_tree_root_does_not_own_alone_is_refused_with_the_fix(tmp_path, busybox_path, q25tok_bin, artifacts, case):
    """Whoever owns or can write a directory in the tree, or above it, can swap what root reads
    or writes there: refused before anything is written, in one line that names the path, its
    owner and mode, and the fix (never repaired by the script)."""
    bb = busybox_path
    board = installed(bb, tmp_path, q25tok_bin, artifacts)
    base, lib = board / INSTALL, board / "lib"
    if case == "group-writable releases":
        (base / "releases").chmod(0o775)
        want = (
            f"q25-ota: {base}/releases can be written by others than root (mode drwxrwxr-x): root installs "
            f"only into a tree that is its own alone (one owner per tree): chown -R root:root {base} && "
            f"chmod -R go-w {base}"
        )
    else:
        if case == "a deploy user's directory above":
            os.lchown(lib, DEPLOY_USER, DEPLOY_USER)
            owner, mode = DEPLOY_USER, "drwxr-xr-x"
        else:
            lib.chmod(0o777)
            owner, mode = 0, "drwxrwxrwx"
        want = (
            f"q25-ota: {lib}, above {base}, is owned by uid {owner} (mode {mode}): whoever owns or can write a "
            "directory above the tree root installs into can swap that tree: make it root's alone "
            f"(chown root:root {lib} && chmod go-w {lib}) or choose a directory below root's own ones"
        )
    before = snapshot(board)
    runs = mender_install(bb, board, artifacts["B"], tmp_path / "tree")
    assert states(runs) == ["ArtifactInstall", "ArtifactRollback", "Cleanup"]
    for r in runs[2:]:
        assert r.returncode != 0 and r.stderr.strip().splitlines() == [want], (r.args[2], r.stderr)
    assert snapshot(board) == before


def test_a_root_owned_sticky_directory_above_is_accepted(tmp_path, busybox_path, q25tok_bin, artifacts):
    """Above the tree, a root-owned sticky directory (as /tmp is) is not another user's: only an
    entry's owner may rename or remove it, and the entry below is checked to be root's. A
    directory below it that someone else made is refused."""
    bb = busybox_path
    board = installed(bb, tmp_path, q25tok_bin, artifacts)
    (board / "lib").chmod(0o1777)
    runs = mender_install(bb, board, artifacts["B"], tmp_path / "tree")
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    firmware = board / "lib" / "firmware"
    os.lchown(firmware, DEPLOY_USER, DEPLOY_USER)  # theirs, in the sticky directory
    r = sh(bb, board, "ArtifactInstall", str(tmp_path / "tree"))
    assert r.returncode != 0 and f"{firmware}, above {board / INSTALL}, is owned by uid {DEPLOY_USER}" in r.stderr


# -- item 1: root's records are never copied from a file another user can write ------------------
def plant_settle_case(base: Path, how: str, elsewhere: Path) -> str:
    """What the deploy user plants (item 1): a release U of theirs whose release.json lists a
    q25tok of theirs, and a `.q25-ota/` settle case naming it (`new` U, `old` the current
    release, `current` -> U, a malformed `state.new`, so the next install dies in settle) with a
    `state.old` that makes U the current release, its q25tok's digest recorded. Returns U."""
    state = json.loads((base / ".q25deploy-state.json").read_text())
    a, u = state["current"], "0123456789abcdef"
    shutil.copytree(base / "releases" / a, base / "releases" / u)
    q25tok = base / "releases" / u / "q25tok"
    q25tok.write_text("#!/bin/sh\necho ran >> /tmp/q25-ota-ran-the-deploy-users-q25tok\n")
    q25tok.chmod(0o755)
    digest, size = hashlib.sha256(q25tok.read_bytes()).hexdigest(), q25tok.stat().st_size
    rj = base / "releases" / u / "release.json"
    doc = json.loads(rj.read_text())
    doc["id"] = u
    doc["files"] = sorted([*doc["files"], {"path": "q25tok", "sha256": digest, "size": size}], key=lambda f: f["path"])
    rj.write_bytes(json_bytes(doc))
    rec = {**state["releases"][a], "files": {**state["releases"][a]["files"], "q25tok": [digest, size]}}
    theirs = {**state, "current": u, "previous": a, "releases": {**state["releases"], u: rec}}
    ota = base / ".q25-ota"
    ota.mkdir()
    for name, text in (("new", u), ("old", a), ("created", "0")):
        (ota / name).write_text(text + "\n")
    (ota / "state.new").write_text("{}\n")  # not a state: settle dies on it, the engine rolls back
    if how == "hard-linked":  # root's file, but another name of it is elsewhere
        elsewhere.write_bytes(json_bytes(theirs))
        os.link(elsewhere, ota / "state.old")
    elif how == "not a state file":  # root's, one name, but not the state file's format
        (ota / "state.old").write_text(json.dumps(theirs))
    elif how == "another current":  # a state file, but not the one before the update it rolls back
        (ota / "state.old").write_bytes(json_bytes(theirs))
    else:  # the deploy user's install dir: all of it theirs
        (ota / "state.old").write_bytes(json_bytes(theirs))
        chown_tree(base, DEPLOY_USER)
    (base / "current").unlink()
    (base / "current").symlink_to(f"releases/{u}")
    if how == "the deploy user's":
        os.lchown(base / "current", DEPLOY_USER, DEPLOY_USER)
    return u


@pytest.mark.parametrize("how", ["the deploy user's", "hard-linked", "not a state file", "another current"])
def test_a_rollback_copies_no_state_it_did_not_write(tmp_path, busybox_path, q25tok_bin, artifacts, how):
    """Item 1: a planted settle case with a malformed state.new: the next install died in
    settle, the engine ran ArtifactRollback, and rollback() copied state.old unread into the
    state file: root's state then named the deploy user's release and its q25tok's digest (which
    smoke, status and deploy --become sudo trust). Now a record root reads is a regular file of
    root's, one name, no one else can write it, in the state file's format, the state before
    the update it rolls back; the state file is left as it was."""
    bb = busybox_path
    board = installed(bb, tmp_path, q25tok_bin, artifacts)
    base = board / INSTALL
    state = base / ".q25deploy-state.json"
    before = state.read_bytes()
    u = plant_settle_case(base, how, tmp_path / "elsewhere.json")
    runs = mender_install(bb, board, artifacts["B"], tmp_path / "tree")
    assert states(runs) == ["ArtifactInstall", "ArtifactRollback", "Cleanup"]
    install, rollback = runs[2], runs[3]
    assert state.read_bytes() == before and u not in state.read_text(), "root's state names the user's release"
    assert install.returncode != 0 and rollback.returncode != 0, (install.stderr, rollback.stderr)
    if how == "the deploy user's":
        assert f"{base} is owned by uid {DEPLOY_USER}" in install.stderr + rollback.stderr
        return
    assert "state.new: '{}' is not what q25-ota wrote there" in install.stderr, install.stderr
    want = {
        "hard-linked": "state.old is not a record q25-ota wrote (mode -rw-r--r--, 2 name(s), uid 0)",
        "not a state file": f'state.old: \'{{"current": "{u}", "format": "q25deploy-board-state/1"',
        "another current": "state.old: its current is not the release this update replaced",
    }[how]
    assert want in rollback.stderr, rollback.stderr
    assert os.readlink(base / "current") == f"releases/{u}", "the rollback switched before it checked"


@pytest.mark.parametrize("how", ["the deploy user's", "group-writable", "hard-linked"])
def test_an_update_records_no_digest_from_a_release_json_it_does_not_own(
    tmp_path, busybox_path, q25tok_bin, artifacts, how
):
    """Item 1, the successful update: the state's record of the previous release was copied
    from its release.json, whoever could write that: a q25tok the deploy user listed there got
    its digest into root's state. Now release.json is read as one of root's records (root's
    alone, one name): else the update is refused and the state stays as it was."""
    bb = busybox_path
    board = installed(bb, tmp_path, q25tok_bin, artifacts)
    base = board / INSTALL
    state = base / ".q25deploy-state.json"
    before = state.read_bytes()
    a = json.loads(before)["current"]
    rj = base / "releases" / a / "release.json"
    doc = json.loads(rj.read_text())
    doc["files"] = sorted([*doc["files"], {"path": "q25tok", "sha256": "7" * 64, "size": 1}], key=lambda f: f["path"])
    rj.unlink()
    if how == "hard-linked":
        elsewhere = tmp_path / "release.json"
        elsewhere.write_bytes(json_bytes(doc))
        os.link(elsewhere, rj)
    else:
        rj.write_bytes(json_bytes(doc))
        if how == "group-writable":
            rj.chmod(0o664)
        else:
            os.lchown(rj, DEPLOY_USER, DEPLOY_USER)
    runs = mender_install(bb, board, artifacts["B"], tmp_path / "tree")
    after = json.loads(state.read_text())
    assert "q25tok" not in after["releases"][a]["files"], "root's state took a digest from a file it does not own"
    assert state.read_bytes() == before and os.readlink(base / "current") == f"releases/{a}"
    install = runs[2]
    assert install.args[2] == "ArtifactInstall" and install.returncode != 0, install.stderr
    want = {
        "the deploy user's": f"{rj} is owned by uid {DEPLOY_USER} (mode -rw-r--r--)",
        "group-writable": f"{rj} can be written by others than root (mode -rw-rw-r--)",
        "hard-linked": f"{rj} is not a record q25-ota wrote (mode -rw-r--r--, 2 name(s), uid 0)",
    }[how]
    assert want in install.stderr, install.stderr


# -- item 3: root chmods no file of the current release ------------------------------------------
@pytest.mark.parametrize("owner", ["the deploy user's", "root's"])
def test_a_tokenizer_only_update_chmods_no_hard_link(tmp_path, busybox_path, q25tok_bin, artifacts, owner):
    """Item 3: a tokenizer-only update hard-links every file the current release.json lists
    into staging, and set_modes chmodded them before verify_release: a hard link to /etc/shadow
    (a stand-in here, root's, 0640) listed there became 0644. Now a file linked from the current
    release must already have the release's mode (it is never chmodded), modes are set only
    after the staging verifies, and only on files root placed itself."""
    bb = busybox_path
    board = installed(bb, tmp_path, q25tok_bin, artifacts)
    base = board / INSTALL
    cur = json.loads((base / ".q25deploy-state.json").read_text())["current"]
    shadow = tmp_path / "etc-shadow"
    shadow.write_text("root:$6$not-for-anyone:19000:0:99999:7:::\n")
    shadow.chmod(0o640)
    rdir = base / "releases" / cur
    os.link(shadow, rdir / "shadow")  # the deploy user's link (where fs.protected_hardlinks=0)
    rj = rdir / "release.json"
    doc = json.loads(rj.read_text())
    entry = {"path": "shadow", "sha256": "0" * 64, "size": shadow.stat().st_size}  # they cannot read it
    doc["files"] = sorted([*doc["files"], entry], key=lambda f: f["path"])
    rj.write_bytes(json_bytes(doc))
    if owner == "the deploy user's":
        chown_tree(base, DEPLOY_USER)
    runs = mender_install(bb, board, artifacts["A2-tok"], tmp_path / "tree")
    assert stat.S_IMODE(shadow.stat().st_mode) == 0o640, "root chmodded a hard link of the current release"
    assert shadow.stat().st_uid == 0
    install = runs[2]
    assert install.args[2] == "ArtifactInstall" and install.returncode != 0, install.stderr
    assert os.readlink(base / "current") == f"releases/{cur}"
    if owner == "root's":
        assert f"{rdir}/shadow is not a release file as q25-ota installs it (-rw-r--r--" in install.stderr
    else:
        assert f"{base} is owned by uid {DEPLOY_USER}" in install.stderr, install.stderr
