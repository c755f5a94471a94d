"""q25tok ota's file system (ota_fs.c, ota.h's "the file system"): ota_fs_test.c's checks built
under ASan+UBSan, run as root and as another user (the deploy user, uid 65534) with files of a
third user's in and above the trees; and its refusals word for word as q25-ota.sh's own functions
(own_tree, own_record, own_file, place, put: ota_fs_reference.sh) print them under BusyBox sh,
for the same files."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_user import USER, need_root, reachable_dir
from requirements import need_program

from q25deploy.packer.runtime import SANITIZE_FLAGS
from q25deploy.resources import runtime_library_sources, runtime_sources

HERE = Path(__file__).parent
SCRIPT = HERE / "ota_fs_reference.sh"  # q25-ota.sh's functions, as they were
THIRD = 65533  # another user than the one running the checks, when that is the deploy user
ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1"}


@pytest.fixture(scope="module")
def tools() -> Iterator[dict[str, Path]]:
    """The test program and BusyBox's applets, where the deploy user can run them."""
    cc = need_program("cc", "Debian: gcc")
    d = reachable_dir("q25-ota-fs-")
    try:
        src = runtime_sources()
        exe = d / "ota_fs_test"
        sources = [HERE / "ota_fs_test.c", src / "ota_fs.c", src / "cli_open.c", *runtime_library_sources()]
        subprocess.run(
            [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", *SANITIZE_FLAGS.split(), "-I", src] + [*sources, "-o", exe],
            check=True,
        )
        shutil.copy(SCRIPT, d / SCRIPT.name)  # readable by the deploy user wherever the checkout is
        out = {"exe": exe, "sh": d / SCRIPT.name}
        bb = shutil.which("busybox")
        if bb:
            (d / "bin").mkdir(mode=0o755)
            subprocess.run([bb, "--install", "-s", str(d / "bin")], check=True)
            out["bin"] = d / "bin"
        yield out
    finally:
        shutil.rmtree(d)


def run(argv: list, uid: int | None = None, **kw) -> subprocess.CompletedProcess:
    user = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **user, **kw)


def chown_all(top: Path, uid: int) -> None:
    for d, dirs, files in os.walk(top):
        os.lchown(d, uid, uid)
        for name in dirs + files:
            os.lchown(Path(d) / name, uid, uid)


def foreign(top: Path, me: int, other: int) -> Path:
    """What ota_fs_test.c's FOREIGN holds: tree/sub/theirs (other's, in a tree of me's), above/
    (other's), sticky/ (root's, 1777) with mine/ (me's) in it, theirlink -> sticky (other's link)."""
    (top / "tree" / "sub").mkdir(parents=True)
    (top / "tree" / "sub" / "theirs").write_text("")
    (top / "above").mkdir()
    (top / "sticky" / "mine").mkdir(parents=True)
    (top / "theirlink").symlink_to("sticky")
    for p in (top, top / "tree", top / "tree" / "sub", top / "above", top / "sticky", top / "sticky" / "mine"):
        p.chmod(0o755)
    (top / "tree" / "sub" / "theirs").chmod(0o644)
    (top / "sticky").chmod(0o1777)
    chown_all(top / "tree", me)
    os.lchown(top / "sticky" / "mine", me, me)
    for p in (top / "tree" / "sub" / "theirs", top / "above", top / "theirlink"):
        os.lchown(p, other, other)
    return top


def passed(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0 and r.stdout.endswith(" passed, 0 failed\n"), r.stdout + r.stderr
    assert "skipped" not in r.stdout or os.geteuid() != 0, r.stdout


def test_the_file_system_checks_as_the_user_running_the_tests(tools, tmp_path):
    """As root (CI): with files of the deploy user's; as another user: without (nothing to chown)."""
    (tmp_path / "work").mkdir()
    extra = [foreign(tmp_path / "foreign", 0, USER)] if os.geteuid() == 0 else []
    passed(run([tools["exe"], tmp_path / "work", *extra], env=ENV))


def test_the_file_system_checks_as_the_deploy_user(tools):
    """ota_me != 0: "uid 65534" in the messages, "65534:65534" in the fixes; a root-owned
    directory above is theirs to trust, a third user's is not."""
    need_root()
    top = reachable_dir("q25-ota-fs-user-")
    try:
        (top / "work").mkdir(mode=0o755)
        os.chown(top / "work", USER, USER)
        fo = foreign(top / "foreign", USER, THIRD)
        passed(run([tools["exe"], top / "work", fo], uid=USER, env=ENV))
    finally:
        shutil.rmtree(top)


def situations(top: Path, other: int) -> list[tuple[str, str, str]]:
    """Files for each refusal (and two acceptances): (function, arg 1, arg 2)."""
    for d in ("gw/a", "ok/sub", "wide/deeper", "rec/dir", "theirs/sub"):
        (top / d).mkdir(parents=True)
    (top / "gw" / "a").chmod(0o775)
    (top / "gw" / "a" / "b").write_text("")
    (top / "ok" / "sub" / "f").write_text("")
    (top / "ok" / "link").symlink_to("sub")
    (top / "wide").chmod(0o775)
    (top / "via").symlink_to("wide/deeper")
    rec = top / "rec"
    (rec / "one").write_text("one\n")
    (rec / "state").write_text("{}\n")
    os.link(rec / "state", rec / "state2")
    os.mkfifo(rec / "fifo", 0o600)
    (rec / "link").symlink_to("one")
    (rec / "gw").write_text("")
    (rec / "gw").chmod(0o664)
    (top / "theirs" / "sub" / "f").write_text("")
    t = str(top)
    cases = [
        ("own_tree", f"{t}/gw", "install"),
        ("own_tree", f"{t}/gw", "payload"),
        ("own_tree", f"{t}/ok", "install"),
        ("own_tree", f"{t}/ok/link", "install"),
        ("own_tree", f"{t}/rec/state", "install"),
        ("own_tree", f"{t}/wide/tree", "install"),
        ("own_tree", f"{t}/via/tree", "payload"),
        ("own_tree", f"{t}/ok/sub/f/x", "install"),
        ("own_record", f"{t}/rec/state", ""),
        ("own_record", f"{t}/rec/fifo", ""),
        ("own_record", f"{t}/rec/link", ""),
        ("own_record", f"{t}/rec/gw", ""),
        ("own_record", f"{t}/rec/one", ""),
        ("own_file", f"{t}/rec/state", "-rwxr-xr-x"),
        ("own_file", f"{t}/rec/none", "-rw-r--r--"),
        ("own_file", f"{t}/rec/state", "-rw-r--r--"),
        ("place", f"{t}/rec/one", f"{t}/rec/state"),
        ("place", f"{t}/rec/fifo", f"{t}/rec/x"),
        ("place", f"{t}/rec/link", f"{t}/rec/x"),
        ("put", f"{t}/rec/dir", ""),
        ("put", f"{t}/rec/link", ""),
    ]
    if os.geteuid() == 0:  # a file and a directory above of another user's
        (top / "above").mkdir()
        (top / "to-above").symlink_to("above")
        for p in (top / "theirs" / "sub" / "f", top / "above"):
            os.lchown(p, other, other)
        cases += [("own_tree", f"{t}/theirs", "install"), ("own_tree", f"{t}/theirs", "payload")]
        cases += [("own_tree", f"{t}/above/tree", "install"), ("own_tree", f"{t}/to-above/tree", "payload")]
    return cases


@pytest.mark.parametrize("who", ["this user", "the deploy user"])
def test_the_refusals_are_word_for_word_the_shells(tools, who):
    if "bin" not in tools:
        need_program("busybox", "Debian: busybox-static")
    uid = None
    if who == "the deploy user":
        need_root()
        uid = USER
    top = reachable_dir("q25-ota-fs-sh-")
    try:
        cases = situations(top / "t", THIRD if uid else USER)
        if uid:
            for p in top.joinpath("t").rglob("*"):  # ours, but for the third user's file
                if p.lstat().st_uid == 0:
                    os.lchown(p, uid, uid)
            os.lchown(top / "t", uid, uid)
        refused = 0
        for fn, a1, a2 in cases:
            env = {"PATH": str(tools["bin"])}
            sh = run([tools["bin"] / "sh", tools["sh"], fn, a1, a2], uid, env=env, stdin=subprocess.DEVNULL)
            c = run([tools["exe"], "cli", fn, a1, a2], uid, env=ENV)
            assert (c.returncode, c.stderr) == (sh.returncode, sh.stderr), (fn, a1, a2)
            refused += sh.returncode != 0
        assert refused >= len(cases) - 4, "the situations are refusals but for four"
    finally:
        shutil.rmtree(top)
