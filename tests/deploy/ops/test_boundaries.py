"""Trust boundaries of deploy, against real sshd boards: a tampered build directory or board
state is refused with nothing written outside the install path (the whole tree under the
remote root's parent is compared), a cut between the switch and the state write is settled
by the next run, an unreadable state file is an error, and two deploys to one board do not
interleave."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from deploy_helpers import INSTALL, deploy, tree, wrapped_board
from sshd import USER

from q25deploy.deploy.ops.deployer import BoardFiles
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.hosts import HostSpec


def tamper_json(path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def escape_manifest(doc):
    for a in doc["artifacts"]:
        if a["path"].startswith("partitions/"):
            a["path"] = "partitions/../../../../x"


def escape_image(doc):
    doc["image"]["path"] = "tokenizer/../../../../../../x"


def escape_partition_map(doc):
    doc["regions"][0]["file"] = "../../../../x"


@pytest.mark.parametrize(
    "name, change",
    [("manifest.json", escape_manifest), ("build.json", escape_image), ("partition_map.json", escape_partition_map)],
)
def test_a_tampered_build_directory_writes_nothing(tmp_path, capsys, ssh, models, q25tok, name, change):
    srv, root = ssh["servers"][0], tmp_path / "board"
    build = tmp_path / "build"
    shutil.copytree(models["A"], build)
    tamper_json(build / name, change)
    srv.known_hosts(tmp_path / f"known_hosts_{srv.port}")  # the test's own file, written by each run
    before = tree(tmp_path)
    code, res, err = deploy(capsys, ssh, srv, root, build, runtime=q25tok)
    assert code == 1 and name in err and "internal" not in err, err
    assert tree(tmp_path) == before and not root.exists()


def test_a_symlinked_partition_is_never_sent(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    build = tmp_path / "build"
    shutil.copytree(models["A"], build)
    part = build / "partitions" / "region_00.bin"
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * part.stat().st_size)  # same size: the manifest's size check would pass
    part.unlink()
    part.symlink_to(secret)
    code, _, err = deploy(capsys, ssh, srv, root, build, runtime=q25tok)
    assert code == 1 and "symlink" in err and not root.exists()


def bad_release_id(state):
    rid = state["current"]
    state["releases"]["../../../../x"] = state["releases"].pop(rid)
    state["current"] = "../../../../x"


def escape_state_file(state):
    files = state["releases"][state["current"]]["files"]
    files["../../../../../x"] = files.pop("partition_map.json")


@pytest.mark.parametrize("change", [bad_release_id, escape_state_file])
def test_a_tampered_board_state_is_refused(tmp_path, capsys, ssh, models, q25tok, change):
    srv, root = ssh["servers"][1], tmp_path / "board"
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    tamper_json(root / INSTALL / ".q25deploy-state.json", change)
    before = tree(tmp_path)
    for action, build in (("deploy", models["B"]), ("rollback", models["B"]), ("deploy", models["A"])):
        code, res, _ = deploy(capsys, ssh, srv, root, build, runtime=q25tok, action=action)
        assert code == 13 and "state" in res[0]["error"] and "../../" in res[0]["error"], res
        assert tree(tmp_path) == before  # nothing anywhere, inside the install path or out
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="status")
    assert code == 13 and "error" in res[0]


def _deploy_b_cut_at(tmp_path, capsys, ssh, good, root, models, q25tok, pattern: str):
    """Deploy A through ``good``, then B through a board whose connection dies when ``mv``'s
    destination matches ``pattern``; returns (A's release id, B's exit code, B's results)."""
    code, res, _ = deploy(capsys, ssh, good, root, models["A"], runtime=q25tok)
    release_a = res[0]["release"]
    cut = wrapped_board(
        tmp_path,
        ssh,
        "cut",
        {"mv": f'for last; do :; done\ncase "$last" in {pattern}) kill -9 $PPID; exit 137;; esac\nexec /bin/mv "$@"\n'},
    )
    try:
        code, res, _ = deploy(capsys, ssh, cut, root, models["B"], runtime=q25tok)
    finally:
        cut.stop()
    return release_a, code, res


def test_a_cut_between_switch_and_state_write_is_settled_by_the_next_run(tmp_path, capsys, ssh, models, q25tok):
    good, root = ssh["servers"][2], tmp_path / "board"
    base = root / INSTALL
    # a board whose connection dies while the state file is being put in place
    release_a, code, res = _deploy_b_cut_at(tmp_path, capsys, ssh, good, root, models, q25tok, "*.q25deploy-state.json")
    assert code == 13 and not res[0]["ok"]
    release_b = os.readlink(base / "current").split("/")[1]
    assert release_b != release_a  # switched, but the state still says A
    assert json.loads((base / ".q25deploy-state.json").read_text())["current"] == release_a
    code, res, _ = deploy(capsys, ssh, good, root, models["B"], action="status")
    assert code == 13 and not res[0]["consistent"] and res[0]["pending_switch"] == release_b
    code, res, _ = deploy(capsys, ssh, good, root, models["B"], runtime=q25tok)  # settles it, sends nothing
    assert code == 0 and res[0]["release"] == release_b and res[0]["bytes_sent"] == 0
    assert any("finished the switch" in w for w in res[0]["warnings"])
    state = json.loads((base / ".q25deploy-state.json").read_text())
    assert state["current"] == release_b and state["previous"] == release_a
    assert not (base / ".q25deploy-intent.json").exists() and not (base / ".q25deploy.lock").is_symlink()
    code, res, _ = deploy(capsys, ssh, good, root, models["B"], action="rollback")
    assert code == 0 and os.readlink(base / "current") == f"releases/{release_a}"


def test_an_unreadable_state_file_is_an_error_not_an_empty_board(tmp_path, capsys, ssh, models, q25tok):
    good, root = ssh["servers"][0], tmp_path / "board"
    assert deploy(capsys, ssh, good, root, models["A"], runtime=q25tok)[0] == 0
    broken = wrapped_board(
        tmp_path,
        ssh,
        "io",
        {"cat": 'case "$1" in *.q25deploy-state.json) echo "cat: I/O error" >&2; exit 1;; esac\nexec /bin/cat "$@"\n'},
    )
    broken.known_hosts(tmp_path / f"known_hosts_{broken.port}")
    before = {k: v for k, v in tree(tmp_path).items() if not k.startswith(("bin-io", "io"))}
    try:
        code, res, _ = deploy(capsys, ssh, broken, root, models["B"], runtime=q25tok)
        assert code == 13 and "cannot read" in res[0]["error"] and "I/O error" in res[0]["error"]
        code, res, _ = deploy(capsys, ssh, broken, root, models["B"], action="status")
        assert code == 13 and "cannot read" in res[0]["error"]
    finally:
        broken.stop()
    after = tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(("bin-io", "io"))} == before


def cli(ssh, srv, root, build, q25tok, *extra):
    kh = srv.known_hosts(root.parent / f"kh_{srv.port}")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "q25deploy",
            "deploy",
            "--target",
            "qemu",
            "--host",
            f"{USER}@127.0.0.1:{srv.port}",
            "--build",
            str(build),
            "--identity",
            str(ssh["key"]),
            "--known-hosts",
            str(kh),
            "--remote-root",
            str(root),
            "--runtime-bin",
            str(q25tok),
            "--json",
            "--allow-unreserved",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_two_deploys_to_one_board_do_not_interleave(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][1], tmp_path / "board"
    base = root / INSTALL
    base.mkdir(parents=True)
    os.symlink("q25deploy-lock:999999999:1:00000000:ghost@gone", base / ".q25deploy.lock")  # stale: no such process
    runs: dict[str, subprocess.CompletedProcess] = {}
    threads = [
        threading.Thread(target=lambda n=n: runs.__setitem__(n, cli(ssh, srv, root, models[n], q25tok)))
        for n in ("A", "B")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = {n: json.loads(r.stdout)[0] for n, r in runs.items()}
    assert all(r.returncode in (0, 13) for r in runs.values()), {n: r.stderr for n, r in runs.items()}
    ok = [n for n, r in results.items() if r["ok"]]
    assert ok and all("busy" in results[n]["error"] for n in results if n not in ok)
    state = json.loads((base / ".q25deploy-state.json").read_text())
    assert os.readlink(base / "current") == f"releases/{state['current']}"
    if len(ok) == 2:  # the second waited for the first and saw its release
        assert {state["current"], state["previous"]} == {results["A"]["release"], results["B"]["release"]}
    assert not (base / ".q25deploy.lock").is_symlink() and not list((base / "releases").glob(".incoming-*"))
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="status")
    assert code == 0 and res[0]["consistent"]


def test_removing_a_release_never_removes_the_current_one(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][2], tmp_path / "board"
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    rid = res[0]["release"]
    spec = HostSpec("127.0.0.1", USER, srv.port)
    with ParamikoSession(
        spec, identity=str(ssh["key"]), known_hosts=str(srv.known_hosts(tmp_path / "kh")), trust_new_host=False
    ) as board:
        files = BoardFiles(board, str(root), "/lib/firmware/q25")
        files.remove_release(rid)
        assert (root / INSTALL / "releases" / rid).is_dir()
        for bad in ("../x", "/etc", "releases//x", "releases/./x", ""):
            with pytest.raises(Exception, match="refusing"):
                files.path(bad)


def test_a_cut_before_the_switch_is_dropped_and_a_lost_link_restored(tmp_path, capsys, ssh, models, q25tok):
    good, root = ssh["servers"][0], tmp_path / "board"
    base = root / INSTALL
    # the connection dies at the switch itself: the intent is on the board, current is not moved
    release_a, code, res = _deploy_b_cut_at(tmp_path, capsys, ssh, good, root, models, q25tok, "*/current")
    assert code == 13 and (base / ".q25deploy-intent.json").exists()
    assert os.readlink(base / "current") == f"releases/{release_a}"
    (base / "current").unlink()  # and, say, a BusyBox ln -sfn cut halfway: no link at all
    code, res, _ = deploy(capsys, ssh, good, root, models["A"], runtime=q25tok)
    assert code == 0 and res[0]["bytes_sent"] == 0, res
    assert any("dropped the switch" in w for w in res[0]["warnings"])
    assert any("restored the current link" in w for w in res[0]["warnings"])
    assert os.readlink(base / "current") == f"releases/{release_a}"
    assert json.loads((base / ".q25deploy-state.json").read_text())["current"] == release_a
    assert not (base / ".q25deploy-intent.json").exists()


def test_the_state_is_never_written_through_a_planted_link(tmp_path, capsys, ssh, models, q25tok):
    """Links planted at the names the old state and intent writes went through (`<name>.tmp`)
    point at a stand-in for /etc/passwd: the deploy writes through fresh temporaries (mktemp)
    and the stand-in is untouched (as issue 22's item 2 for the OTA script)."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    base = root / INSTALL
    base.mkdir(parents=True)
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\n")
    for name in (".q25deploy-state.json.tmp", ".q25deploy-intent.json.tmp"):
        os.symlink(passwd, base / name)
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0 and res[0]["ok"], res
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/sh\n"
    assert json.loads((base / ".q25deploy-state.json").read_text())["current"] == res[0]["release"]
    assert not [
        p.name for p in base.iterdir() if p.name.startswith(".q25deploy-state.json.") and not p.is_symlink()
    ]  # no temporary left
