"""One owner per tree (issue 44, the board script): q25-ota.sh under BusyBox sh with only
BusyBox applets on PATH, driven through the real Mender client's state order
(ota_helpers.mender_install), against a scratch root standing in for the board's. The deploy
user is uid 65534: an install dir of theirs (a `deploy --become none` install), or a directory
of theirs above it, is refused by every step with the fix, and nothing is changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, make_board, mender_install, package, sh, swupdate_install

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
