"""The board script trusts nothing in the install dir (issue 22, items 1-5): q25-ota.sh under
BusyBox sh with only BusyBox applets on PATH and Q25_ROOT a scratch root, as the update engines
call it. What anyone who can write the install dir plants there (a crafted `.q25-ota/` record,
a symlink at the state file or its temporary, a symlinked `releases/` or release) and a plan
whose paths are not plain are refused: nothing outside the install dir is touched, nothing
that is not ours is removed, and the current release stays as it was."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, make_board, mender_install, mender_tree, package, sh, swupdate_install


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, ota_builds) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("trust-artifacts")
    return {
        "A": package(ota_builds["A"], "mender", d / "a.mender"),
        "B": package(ota_builds["B"], "mender", d / "b.mender"),
        "A2-tok": package(ota_builds["A2"], "mender", d / "a2-tok.mender", "--tokenizer-only"),
        "reserving": ota_builds["A"],  # the build whose regions the boards' device tree reserves
    }


def installed(bb: str, root: Path, q25tok: Path, artifacts: dict[str, Path], tree: Path) -> Path:
    """A board with artifact A installed through every Mender state."""
    board = make_board(root, q25tok, artifacts["reserving"])
    runs = mender_install(bb, board, artifacts["A"], tree)
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    return board


def state_of(board: Path) -> dict:
    return json.loads((board / INSTALL / ".q25deploy-state.json").read_text())


def current_image(board: Path) -> tuple[Path, str]:
    """The current release's image and its sha256 in the state file."""
    state = state_of(board)
    rec = state["releases"][state["current"]]
    return board / INSTALL / "releases" / state["current"] / rec["image"], rec["files"][rec["image"]][0]


def edit_plan(tree: Path, pattern: str, repl: str) -> None:
    plan = tree / "files" / "q25-plan"
    text, n = re.subn(pattern, repl, plan.read_text(), flags=re.M)
    assert n, pattern
    plan.write_text(text)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "record, value", [("new", "../../../../../victim"), ("old", "../../../../../victim"), ("created", "1\nx")]
)
def test_rollback_takes_nothing_from_its_records_on_trust(tmp_path, busybox_path, q25tok_bin, artifacts, record, value):
    """Item 1: `.q25-ota/new` of `../../../../../victim` had `rm -rf` delete a directory outside
    the install dir (`old` of that shape pointed `current` there)."""
    bb = busybox_path
    board = installed(bb, tmp_path / "board", q25tok_bin, artifacts, tmp_path / "tree")
    victim = tmp_path / "victim"  # what releases/../../../../../victim names
    victim.mkdir()
    (victim / "keep").write_text("not q25deploy's")
    tree = mender_tree(artifacts["B"], tmp_path / "tree")
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    (board / INSTALL / ".q25-ota" / record).write_text(value + "\n")
    r = sh(bb, board, "ArtifactRollback", str(tree))
    assert r.returncode != 0 and "not what q25-ota wrote" in r.stderr, r.stderr
    assert (victim / "keep").read_text() == "not q25deploy's"
    assert ".." not in os.readlink(board / INSTALL / "current")


def test_the_state_file_is_never_written_through_a_planted_link(tmp_path, busybox_path, q25tok_bin, artifacts):
    """Item 2: a symlink at `.q25deploy-state.json.tmp` made the state write overwrite its target
    (a stand-in for /etc/passwd); a symlinked state file is refused."""
    bb = busybox_path
    board = installed(bb, tmp_path / "board", q25tok_bin, artifacts, tmp_path / "tree")
    base = board / INSTALL
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\n")
    (base / ".q25deploy-state.json.tmp").symlink_to(passwd)
    runs = mender_install(bb, board, artifacts["B"], tmp_path / "tree")
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/sh\n" and state_of(board)["previous"]
    assert os.readlink(base / ".q25deploy-state.json.tmp") == str(passwd)  # not ours: left as it is
    state = base / ".q25deploy-state.json"
    state.unlink()
    state.symlink_to(passwd)
    before = layout(board)
    runs = mender_install(bb, board, artifacts["A"], tmp_path / "tree")
    assert runs[2].args[2] == "ArtifactInstall" and runs[2].returncode != 0 and "symlink" in runs[2].stderr
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/sh\n" and layout(board) == before


def test_a_symlinked_releases_dir_is_refused_and_what_it_holds_kept(tmp_path, busybox_path, q25tok_bin, artifacts):
    """Item 3: with `releases/` a symlink, the prune loop deleted every directory of its target.
    And in a real `releases/`, only release ids are ever pruned."""
    bb = busybox_path
    board = make_board(tmp_path / "board", q25tok_bin, artifacts["reserving"])
    elsewhere = tmp_path / "elsewhere"
    for d in ("0123456789abcdef", "notes"):
        (elsewhere / d).mkdir(parents=True)
    (board / INSTALL).mkdir(parents=True)
    (board / INSTALL / "releases").symlink_to(elsewhere)
    runs = mender_install(bb, board, artifacts["A"], tmp_path / "tree")
    assert runs[2].args[2] == "ArtifactInstall" and runs[2].returncode != 0 and "symlink" in runs[2].stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["0123456789abcdef", "notes"]
    (board / INSTALL / "releases").unlink()
    (board / INSTALL / "releases" / "notes").mkdir(parents=True)  # somebody's directory: not a release
    for art in ("A", "B"):
        assert all(r.returncode == 0 for r in mender_install(bb, board, artifacts[art], tmp_path / "tree"))
    assert (board / INSTALL / "releases" / "notes").is_dir()


def test_the_smoke_test_refuses_a_current_release_that_is_a_link(tmp_path, busybox_path, q25tok_bin, artifacts):
    """`current`'s target replaced by a symlink to a copy elsewhere: the smoke test (root) refuses it."""
    bb = busybox_path
    board = installed(bb, tmp_path / "board", q25tok_bin, artifacts, tmp_path / "tree")
    rdir = board / INSTALL / "releases" / state_of(board)["current"]
    shutil.copytree(rdir, tmp_path / "copy")
    shutil.rmtree(rdir)
    rdir.symlink_to(tmp_path / "copy")
    tree = mender_tree(artifacts["A"], tmp_path / "tree")
    r = sh(bb, board, "smoke", str(tree / "files"))
    assert r.returncode != 0 and "symlink" in r.stderr and "smoke test passed" not in r.stderr, r.stderr


@pytest.mark.parametrize("spelling", ["./tokenizer.q25tokrt", "tokenizer.q25tokrt "])
def test_a_tokenizer_only_plan_never_changes_the_live_image(tmp_path, busybox_path, q25tok_bin, artifacts, spelling):
    """Item 4: the image named `./tokenizer.q25tokrt` (or with a trailing space) was not matched
    by a grep, so the live release's hard link was kept and the new image copied onto it. Now the
    plan's paths are plain (refused otherwise) and matched exactly."""
    bb = busybox_path
    board = installed(bb, tmp_path / "board", q25tok_bin, artifacts, tmp_path / "tree")
    image, digest = current_image(board)
    old = state_of(board)["current"]
    tree = mender_tree(artifacts["A2-tok"], tmp_path / "tree")
    edit_plan(tree, r"^(file \S+ \S+ \S+) tokenizer\.q25tokrt$", rf"\1 {spelling}")
    before = layout(board)
    install = sh(bb, board, "ArtifactInstall", str(tree))
    assert sha256(image) == digest  # the running release's image never changes in place
    if spelling.startswith("./"):
        assert install.returncode != 0 and "unsafe path" in install.stderr, install.stderr
        assert layout(board) == before
        return
    assert install.returncode == 0, install.stderr
    assert sh(bb, board, "ArtifactCommit", str(tree)).returncode == 0
    new_image, new_digest = current_image(board)
    assert state_of(board)["previous"] == old and sha256(new_image) == new_digest != digest


@pytest.mark.parametrize(
    "q25tok", ["/" + "../" * 16 + "bin/rm", "/bin/rm", "/lib/firmware/q25/current/q25tok", "usr/bin/q25tok"]
)
def test_the_plan_names_no_q25tok_outside_the_root_or_inside_the_install_dir(
    tmp_path, busybox_path, q25tok_bin, artifacts, q25tok
):
    """Item 5: `q25tok /../../../../bin/rm` left Q25_ROOT and the smoke step ran `rm` as root on
    the current image; a plain `/bin/rm` would run it too (the plan's q25tok must be named
    q25tok). A q25tok inside the install dir is anybody's who can write there."""
    bb = busybox_path
    board = installed(bb, tmp_path / "board", q25tok_bin, artifacts, tmp_path / "tree")
    before = layout(board)
    tree = mender_tree(artifacts["B"], tmp_path / "tree")
    edit_plan(tree, r"^q25tok .*$", f"q25tok {q25tok}")
    install = sh(bb, board, "ArtifactInstall", str(tree))
    assert install.returncode != 0 and "q25tok" in install.stderr, install.stderr
    assert layout(board) == before


def test_every_plan_line_is_checked_before_anything_is_staged(tmp_path, busybox_path, q25tok_bin, artifacts):
    """The plan is checked as strictly as `q25deploy package` writes it: a release path twice or
    named release.json, a payload name that is not plain, a field too many, a fingerprint or
    smoke line out of shape are refused before anything is written."""
    bb = busybox_path
    board = installed(bb, tmp_path / "board", q25tok_bin, artifacts, tmp_path / "tree")
    before = layout(board)
    for pattern, repl in (
        (r"^(file \S+ \S+ \S+) partition_map\.json$", r"\1 release.json"),
        (r"^(file \S+ \S+ \S+) partition_map\.json$", r"\1 tokenizer.q25tokrt"),
        (r"^(file \S+ \S+) partition_map\.json (partition_map\.json)$", r"\1 ../x \2"),
        (r"^(file .* partition_map\.json)$", r"\1 extra"),
        (r"^fingerprint .*$", "fingerprint " + "A" * 64),
        (r"^(smoke \S+ )\S+", r"\g<1>2"),
    ):
        tree = mender_tree(artifacts["B"], tmp_path / "tree")
        edit_plan(tree, pattern, repl)
        r = sh(bb, board, "ArtifactInstall", str(tree))
        assert r.returncode != 0 and "plan" in r.stderr, (pattern, r.stderr)
        assert layout(board) == before, pattern


def test_swupdate_writes_the_payload_into_a_fresh_drop_directory(tmp_path, busybox_path, q25tok_bin, ota_builds):
    """SWUpdate's files handler writes into `.q25-ota-incoming` under the install dir before the
    post-install: the script's preinst (SWUpdate calls it before the files) refuses a planted
    link there and replaces a leftover directory with a fresh one of its own."""
    bb = busybox_path
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    swu = package(ota_builds["A"], "swupdate", tmp_path / "a.swu")
    elsewhere, drop = tmp_path / "elsewhere", board / INSTALL / ".q25-ota-incoming"
    elsewhere.mkdir()
    drop.parent.mkdir(parents=True)
    drop.symlink_to(elsewhere)
    r = swupdate_install(bb, board, swu)
    assert r.returncode != 0 and "symlink" in r.stderr and not list(elsewhere.iterdir()), r.stderr
    drop.unlink()
    drop.mkdir()
    (drop / "q25-plan").write_text("left over\n")
    r = swupdate_install(bb, board, swu)
    assert r.returncode == 0 and "smoke test passed" in r.stdout and not drop.exists(), r.stderr  # progress: stdout
