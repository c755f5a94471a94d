"""One owner per install directory (issue 44, :mod:`q25deploy.deploy.state.owners`): where root installs
(a root login, ``--become``), an install dir a deploy user (uid 65534) owns or can write, or a
directory above it they own, is refused before anything is written, in one line naming the path,
its owner and the fix; where a deploy user installs, an install dir root uses is refused with the
reason. The decision on data; the listing script on real trees under BusyBox ``sh`` and dash (as
root and as uid 65534); the whole command through a real sshd logged in as root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from deploy_helpers import INSTALL, deploy, tree, wrapped_board
from requirements import need, need_program

from q25deploy.deploy.state.owners import SCRIPT, Listing, parse, refusal
from q25deploy.errors import DeployError

USER_UID = 65534  # the deploy user: nobody
SHELLS = {"dash": ["dash", "-c"], "busybox": ["busybox", "sh", "-c"]}
BASE = "/b/lib/firmware/q25"
FIX = f"chown -R root:root {BASE} && chmod -R go-w {BASE}"


def way(base_owner: int = 0, base_mode: str = "drwxr-xr-x") -> list[str]:
    """SCRIPT's lines for / and each directory down to BASE: root's, 0755 (BASE as given)."""
    lines = [f"up drwxr-xr-x 2 0 {p}" for p in ("/", "/b", "/b/lib", "/b/lib/firmware")]
    return lines + [f"up {base_mode} 2 {base_owner} {BASE}"]


def listing(*inside: str, up: list[str] | None = None, uid: int = 0, base: bool = True) -> Listing:
    """SCRIPT's answer for BASE: the way ``up`` (default :func:`way`), then what is ``inside``."""
    rest = [f"base {BASE}", *inside, "odd 0"] if base else []
    return parse("\n".join([f"uid {uid}", *(way() if up is None else up), *rest, ""]), "board")


def why(answer: Listing, root: bool = True) -> str | None:
    return refusal(answer, install_dir=BASE, root=root, user="deploy")


def test_a_tree_of_roots_alone_is_accepted_for_root():
    answer = listing(
        f"in drwxr-xr-x 3 0 {BASE}/releases",
        f"in -rw-r--r-- 2 0 {BASE}/releases/0123456789abcdef/q25tok",  # kept files are linked: fine
        f"in lrwxrwxrwx 1 0 {BASE}/current",
        f"in lrwxrwxrwx 1 0 {BASE}/.q25deploy.lock",
        f"in -rw-r--r-- 1 0 {BASE}/.q25deploy-state.json",
        f"absent {BASE}/.q25deploy-state.json.Ab12Cd",  # a temporary that went while listed
        "current releases/0123456789abcdef",
    )
    assert why(answer) is None
    assert why(listing(up=way()[:-1], base=False)) is None  # no install dir yet: root makes it


def test_a_deploy_users_install_dir_is_refused_for_root_with_the_fix():
    text = why(listing(up=way(USER_UID)))
    assert text.startswith(f"{BASE} is owned by uid {USER_UID}, not root") and FIX in text
    assert "--become none), give root its own install dir" in text and "\n" not in text
    text = why(listing(f"in drwxr-xr-x 3 {USER_UID} {BASE}/releases"))
    assert text.startswith(f"{BASE}/releases is owned by uid {USER_UID}") and FIX in text
    link = why(listing(f"in lrwxrwxrwx 1 {USER_UID} {BASE}/.q25deploy.lock"))
    assert link.startswith(f"{BASE}/.q25deploy.lock is owned by uid {USER_UID}")  # a link's own owner counts


@pytest.mark.parametrize(
    "mode, who", [("drwxrwxr-x", "group"), ("drwxr-xrwx", "others"), ("drwxrwxrwt", "group and others")]
)
def test_a_tree_others_can_write_is_refused_for_root(mode, who):
    text = why(listing(f"in {mode} 3 0 {BASE}/releases"))
    assert text.startswith(f"{BASE}/releases is writable by {who} (mode {mode})") and FIX in text


def test_a_directory_above_the_install_dir_is_checked_as_systemd_tmpfiles_would():
    """An ancestor owned by another user, followed by root's: an unsafe transition (its owner can
    rename the install dir away); one others can write, unless sticky (/tmp) and not the install dir."""
    up = way()
    up[1] = f"up drwx------ 2 {USER_UID} /b"
    text = why(listing(up=up, base=False))
    assert text.startswith(f"/b, above the install dir, is owned by uid {USER_UID}, not root")
    assert "chown root:root /b && chmod go-w /b" in text
    up[1] = "up drwxrwxr-x 2 0 /b"
    assert why(listing(up=up)).startswith("/b, above the install dir, is writable by group")
    up[1] = "up drwxrwxrwt 2 0 /b"
    assert why(listing(up=up)) is None  # sticky, as /tmp: others cannot move root's entries in it
    text = why(listing(up=way(0, "drwxrwxrwt")))
    assert text.startswith(f"{BASE} is writable by group and others")  # the install dir itself: sticky or not


def test_roots_records_are_regular_files_of_one_link():
    assert "2 hard links" in why(listing(f"in -rw-r--r-- 2 0 {BASE}/.q25deploy-state.json"))
    assert "2 hard links" in why(listing(f"in -rw-r--r-- 2 0 {BASE}/.q25-ota/state.old"))
    assert "not a regular file" in why(listing(f"in prw-r--r-- 1 0 {BASE}/.q25deploy-intent.json"))
    text = why(listing(f"in lrwxrwxrwx 1 0 {BASE}/current", "current /home/deploy/evil"))
    assert "points at '/home/deploy/evil', not at a release" in text


def test_roots_install_dir_is_refused_for_a_deploy_user_with_the_reason():
    answer = listing(f"in -rw-r--r-- 1 0 {BASE}/.q25deploy-state.json", up=way(USER_UID), uid=USER_UID)
    text = why(answer, root=False)
    assert text.startswith(f"{BASE}/.q25deploy-state.json is root's, not deploy's (uid {USER_UID})")
    assert "never used both ways" in text and "--become sudo" in text and "another install dir" in text
    assert why(listing(uid=USER_UID), root=False).startswith(f"{BASE} is root's")
    assert why(listing(up=way()[:-1], uid=USER_UID, base=False), root=False) is None  # none yet: the user makes it


@pytest.mark.parametrize(
    "text",
    ["", "uid x\n", "uid 0\nup drwxr-xr-x 2 0 relative\n", "uid 0\nin drwxr-xr-x 2 0 /b\n", "uid 0\nup ?rw 1 0 /\n"],
    ids=["empty", "uid-not-a-number", "relative-path", "in-before-base", "bad-mode"],
)
def test_a_malformed_listing_is_an_error(text):
    with pytest.raises(DeployError, match="malformed answer"):
        parse(text, "board")


# -- the listing script on real trees ------------------------------------------------------------


LISTERS = {"busybox": ("busybox", "stat"), "dash": ("dash", "stat"), "dash-ls": ("dash", "ls")}


def run_script(lister: str, base: Path, *, as_user: bool = False) -> Listing:
    """SCRIPT on ``base`` under ``lister``'s shell; "ls": a board whose ``stat`` has no ``-c``
    (dash finds the failing stand-in first on PATH; BusyBox's sh would run its own applet)."""
    shell, tool = LISTERS[lister]
    need_program(shell, "Debian: dash / busybox-static")
    argv = [*SHELLS[shell], SCRIPT, "sh", str(base)]
    if as_user:
        argv = ["setpriv", f"--reuid={USER_UID}", f"--regid={USER_UID}", "--clear-groups", *argv]
    env = dict(os.environ)
    if tool == "ls":
        fake = Path(tempfile.mkdtemp(prefix="q25-nostat-"))
        (fake / "stat").write_text("#!/bin/sh\nexit 1\n")
        (fake / "stat").chmod(0o755)
        fake.chmod(0o755)
        env["PATH"] = f"{fake}:{env['PATH']}"
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env=env)
    finally:
        if tool == "ls":
            shutil.rmtree(fake)
    assert r.returncode == 0, r.stdout + r.stderr
    return parse(r.stdout, "board")


def roots_tree(top: Path) -> Path:
    """A deployed-looking install dir under ``top``: root's, 0755 on the way."""
    base = top / "lib" / "firmware" / "q25"
    release = base / "releases" / "0123456789abcdef"
    (release / "partitions").mkdir(parents=True)
    (release / "q25tok").write_text("x")
    (base / "current").symlink_to("releases/0123456789abcdef")
    (base / ".q25deploy-state.json").write_text("{}")
    for d in (top, top / "lib", base.parent, base, base / "releases", release, release / "partitions"):
        d.chmod(0o755)
    return base


@pytest.mark.parametrize("shell", sorted(LISTERS))
def test_the_listing_of_real_trees_decides_as_on_data(tmp_path, shell):
    need(os.geteuid() == 0, "root (to give a tree to uid 65534)", "run the tests as root, as CI does")
    base = roots_tree(tmp_path / "board")
    answer = run_script(shell, base)
    assert (
        answer.uid == 0
        and answer.base == str(base)
        and refusal(answer, install_dir=str(base), root=True, user="d") is None
    )
    assert {str(base / "current"), str(base / "releases" / "0123456789abcdef" / "q25tok")} <= {
        e.path for e in answer.inside
    }
    assert answer.current == "releases/0123456789abcdef" and answer.odd == 0
    (base / "releases" / "a\nb").write_text("")  # a name that would split its line: left out, counted
    answer = run_script(shell, base)
    assert answer.odd and "has a newline" in refusal(answer, install_dir=str(base), root=True, user="d")
    (base / "releases" / "a\nb").unlink()

    os.chown(base / "releases", USER_UID, USER_UID)  # the deploy user's releases/
    text = refusal(run_script(shell, base), install_dir=str(base), root=True, user="d")
    assert text.startswith(f"{base}/releases is owned by uid {USER_UID}"), text
    os.chown(base / "releases", 0, 0)
    (base / "releases").chmod(0o775)
    assert "writable by group" in refusal(run_script(shell, base), install_dir=str(base), root=True, user="d")
    (base / "releases").chmod(0o755)
    os.link(base / ".q25deploy-state.json", tmp_path / "kept-by-the-user")
    assert "2 hard links" in refusal(run_script(shell, base), install_dir=str(base), root=True, user="d")
    os.unlink(tmp_path / "kept-by-the-user")

    # the install dir reached through a link: what the link leads to is checked too
    (tmp_path / "users").mkdir(mode=0o755)
    os.chown(tmp_path / "users", USER_UID, USER_UID)
    (base.parent / "q25").rename(tmp_path / "users" / "q25")
    base.symlink_to(tmp_path / "users" / "q25")
    text = refusal(run_script(shell, base), install_dir=str(base), root=True, user="d")
    assert text.startswith(f"{tmp_path}/users, above the install dir, is owned by uid {USER_UID}"), text


@pytest.mark.parametrize("shell", sorted(LISTERS))
def test_a_deploy_user_is_told_the_install_dir_is_roots(tmp_path, shell):
    """--become none on an install dir root used: the reason, not a raw permission error."""
    need(os.geteuid() == 0, "root (to run the listing as uid 65534)", "run the tests as root, as CI does")
    need_program("setpriv", "Debian: util-linux")
    top = Path(tempfile.mkdtemp(prefix="q25-owners-"))  # under /tmp, which uid 65534 can reach
    try:
        top.chmod(0o755)
        base = top / "q25"
        base.mkdir(mode=0o755)
        (base / ".q25deploy-state.json").write_text("{}")  # root's record, in the user's dir
        os.chown(base, USER_UID, USER_UID)
        answer = run_script(shell, base, as_user=True)
        assert answer.uid == USER_UID
        text = refusal(answer, install_dir=str(base), root=False, user="deploy")
        assert text.startswith(f"{base}/.q25deploy-state.json is root's, not deploy's"), text
        os.chown(base / ".q25deploy-state.json", USER_UID, USER_UID)
        assert refusal(run_script(shell, base, as_user=True), install_dir=str(base), root=False, user="deploy") is None
    finally:
        shutil.rmtree(top)


# -- the whole command, through a real sshd logged in as root ------------------------------------

SUDO = '[ "$1" = -n ] && [ "$2" = -- ] || exit 1; shift 2; exec "$@"\n'


def owners(top: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_uid, p.lstat().st_mode) for p in [top, *top.rglob("*")]}


def refused(capsys, ssh, server, root: Path, build, *extra, action="deploy", runtime=None) -> str:
    """Run ``action``: it fails this board (exit 13) and changes nothing under ``root``; its error."""
    before = tree(root), owners(root)
    code, res, err = deploy(capsys, ssh, server, root, build, *extra, action=action, runtime=runtime)
    assert code == 13 and res, (code, res, err)
    assert (tree(root), owners(root)) == before  # nothing was written, nothing "repaired"
    return res[0]["error"]


@pytest.mark.parametrize("become", ["none", "sudo"])  # a root login; a deploy user with --become sudo
def test_root_refuses_a_deploy_users_install_dir_before_anything_is_written(
    tmp_path, capsys, ssh, models, q25tok, become
):
    need(os.geteuid() == 0, "a root login (sshd logs in the test user)", "run the tests as root, as CI does")
    server = wrapped_board(tmp_path, ssh, "sudo", {"sudo": SUDO}) if become == "sudo" else ssh["servers"][0]
    root = tmp_path / "board"
    base = root / INSTALL
    try:
        base.mkdir(parents=True)
        (base / "releases").mkdir()
        for p in [base, base / "releases"]:
            os.chown(p, USER_UID, USER_UID)
        for action in ("deploy", "rollback", "smoke", "status"):
            error = refused(capsys, ssh, server, root, models["A"], "--become", become, action=action, runtime=q25tok)
            assert f"{base} is owned by uid {USER_UID}, not root" in error, error
            assert f"chown -R root:root {base} && chmod -R go-w {base}" in error and "nothing was changed" in error
        assert not (base / ".q25deploy.lock").exists()
    finally:
        if server is not ssh["servers"][0]:
            server.stop()


def test_a_group_writable_releases_dir_or_a_users_ancestor_is_refused(tmp_path, capsys, ssh, models, q25tok):
    need(os.geteuid() == 0, "a root login (sshd logs in the test user)", "run the tests as root, as CI does")
    server, root = ssh["servers"][0], tmp_path / "board"
    base = root / INSTALL
    code, res, err = deploy(capsys, ssh, server, root, models["A"], runtime=q25tok)
    assert code == 0 and res[0]["ok"], (res, err)

    (base / "releases").chmod(0o775)
    error = refused(capsys, ssh, server, root, models["B"], runtime=q25tok)
    assert f"{base}/releases is writable by group (mode drwxrwxr-x)" in error and "chmod -R go-w" in error
    (base / "releases").chmod(0o755)

    os.chown(root, USER_UID, USER_UID)  # the remote root: above the install dir
    error = refused(capsys, ssh, server, root, models["B"], runtime=q25tok)
    assert f"{root}, above the install dir, is owned by uid {USER_UID}, not root" in error, error
    os.chown(root, 0, 0)
    fresh = tmp_path / "fresh"  # no install dir yet: nothing is made on the way to it either
    fresh.mkdir()
    os.chown(fresh, USER_UID, USER_UID)
    error = refused(capsys, ssh, server, fresh, models["B"], runtime=q25tok)
    assert f"{fresh}, above the install dir, is owned by uid {USER_UID}" in error and not list(fresh.iterdir())

    state = base / ".q25deploy-state.json"
    os.link(state, tmp_path / "the-users-link")  # made while the user could write here, say
    error = refused(capsys, ssh, server, root, models["B"], action="smoke")
    assert f"{state} has 2 hard links" in error, error
    os.unlink(tmp_path / "the-users-link")

    code, res, err = deploy(capsys, ssh, server, root, models["B"], runtime=q25tok)  # root's again: deploys
    assert code == 0 and res[0]["ok"], (res, err)
    assert json.loads(state.read_text())["current"] == res[0]["release"]


def test_what_root_makes_on_the_way_is_its_alone_whatever_the_login_umask(tmp_path, capsys, ssh, models, q25tok):
    """A login umask of 002 made the directories `mkdir -p` creates on the way to the install dir
    (here the remote root's lib/ and lib/firmware/) group-writable: the next session refused them."""
    need(os.geteuid() == 0, "a root login (sshd logs in the test user)", "run the tests as root, as CI does")
    server = wrapped_board(tmp_path, ssh, "umask002", {"sh": 'umask 002\nexec /bin/sh "$@"\n'})
    root = tmp_path / "board"
    try:
        for build in (models["A"], models["B"]):
            code, res, err = deploy(capsys, ssh, server, root, build, runtime=q25tok)
            assert code == 0 and res[0]["ok"], (res, err)
    finally:
        server.stop()
    base = root / INSTALL
    for made in (root, root / "lib", base.parent, base, base / "releases"):
        assert made.stat().st_mode & 0o022 == 0, made
