"""The board commands log in only once their own checks pass (q25deploy/cli/deploy.py; issue
33, items 4, 7, 8, 9): the program itself (``python -m q25deploy``, which starts the first logins
in the background once the command line is parsed and the target resolved) against a real sshd.
A command whose own checks fail says why in one line *before any login*: the sshd's log, which
records every connection it accepts, is unchanged. A hosts file that is a pipe is read once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshd import SSHServer, board_command, keygen


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    d = tmp_path_factory.mktemp("strict")
    key = keygen(d / "client")
    srv = SSHServer(d / "sshd", key)
    yield srv, key, srv.known_hosts(d / "known_hosts"), d
    srv.stop()


def program(*argv: str, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``q25deploy ARGV`` as a user runs it: its own process, background logins and all."""
    env = {k: v for k, v in os.environ.items() if k != "Q25DEPLOY_DEBUG"}  # errors as a user sees them
    return subprocess.run(
        [sys.executable, "-m", "q25deploy", *argv], input=stdin, capture_output=True, timeout=120, env=env, cwd=cwd
    )


def sshd_log(srv) -> bytes:
    """Everything the board's sshd logged so far (every connection, every accepted key)."""
    time.sleep(0.3)  # a login the program started is in the log well within this
    return (srv.dir / "sshd.log").read_bytes()


def connection(board, root: Path, command: str = "status") -> list[str]:
    srv, key, kh, _ = board
    return board_command(command, srv.port, key, kh, root)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode()
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("q25deploy: "), err
    return err


def tampered(builds, tmp_path: Path, node: str) -> Path:
    """The qemu build with its first region renamed ``node`` in partition_map.json."""
    build = tmp_path / "build"
    shutil.copytree(builds["qemu"], build)
    pmap = json.loads((build / "partition_map.json").read_text())
    pmap["regions"][0]["node"] = node
    (build / "partition_map.json").write_text(json.dumps(pmap))
    return build


FORWARD = ["deploy --forward bogus", "deploy --forward=-1", "smoke --forward bogus", "smoke --forward=-1"]


@pytest.mark.parametrize(
    "case",
    [
        "missing build",
        "tampered map",
        "deploy --quick",
        "status --transfer auto",
        "~nosuchuser known_hosts",
        "forward past the record",
        *FORWARD,
    ],
)
def test_a_command_that_fails_its_own_checks_logs_in_nowhere(board, builds, tmp_path, case):
    """Each failed with its error only after a real login to the board (issue 33, item 7), or
    with a traceback (item 8); ``--forward bogus`` and ``--forward=-1`` logged in before the
    usage error (issue 44, item 6: a second reading of the command line took the value unchecked)."""
    srv, _, _, _ = board
    root = tmp_path / "root"
    if case in FORWARD:
        command, *forward = case.split(" ")
        argv = [*connection(board, root, command), "--build", str(builds["qemu"]), *forward]
    elif case == "missing build":
        argv = [*connection(board, root, "deploy"), "--build", str(tmp_path / "nothing")]
    elif case == "tampered map":  # a foreign no-map node (item 4): refused, in one line, before any login
        argv = [*connection(board, root, "deploy"), "--build", str(tampered(builds, tmp_path, "rproc@70000000"))]
    elif case == "forward past the record":  # the build recorded 7 prompts: an 8th has nothing to compare with
        argv = [*connection(board, root, "smoke"), "--build", str(builds["qemu"]), "--forward", "8"]
    elif case == "deploy --quick":
        argv = [*connection(board, root, "deploy"), "--build", str(builds["qemu"]), "--quick"]
    elif case == "status --transfer auto":
        argv = [*connection(board, root), "--transfer", "auto"]
    else:
        argv = connection(board, root)
        argv[argv.index("--known-hosts") + 1] = "~nosuchuser-q25/known_hosts"
    before = sshd_log(srv)
    proc = program(*argv)
    assert proc.returncode not in (0, 13, 70), proc
    if case in ("deploy --quick", "status --transfer auto"):
        assert proc.returncode == 2 and b"unrecognized arguments" in proc.stderr, proc
    elif case in FORWARD:  # argparse's usage, then its one error line
        errors = [line for line in proc.stderr.decode().splitlines() if "error:" in line]
        assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc
        assert len(errors) == 1 and "argument --forward: not a count of prompts or 'all'" in errors[0], proc
    else:
        err = one_line_error(proc)
        want = {
            "missing build": "no build there",
            "tampered map": "'rproc@70000000' is not a q25deploy region",
            "~nosuchuser known_hosts": "~nosuchuser-q25/known_hosts",
            "forward past the record": "recorded the forward pass on 7 smoke prompt(s): build it again with --forward 8",
        }[case]
        assert want in err, err
    assert sshd_log(srv) == before  # no connection, let alone a login


def test_the_same_commands_do_log_in_where_their_checks_pass(board, builds, tmp_path):
    """The observable above can fail: a status that passes its checks logs in (the sshd
    records it), with its build read through the schema first."""
    srv, _, _, _ = board
    before = sshd_log(srv)
    proc = program(*connection(board, tmp_path / "root"), "--build", str(builds["qemu"]), "--json")
    assert proc.returncode == 0, proc
    after = sshd_log(srv)
    assert after.count(b"Accepted publickey") == before.count(b"Accepted publickey") + 1


@pytest.mark.parametrize("how", ["/dev/stdin", "a pipe"])
def test_a_hosts_file_that_is_a_pipe_is_read_once(board, tmp_path, how):
    """``--hosts-file <(echo HOST)`` and ``/dev/stdin`` (item 9): the background logins read
    the pipe, and the command found it empty: "give at least one --host"."""
    srv, _, _, _ = board
    argv = connection(board, tmp_path / "root")
    i = argv.index("--host")
    host = argv[i + 1]
    del argv[i : i + 2]
    if how == "/dev/stdin":
        proc = program(*argv, "--hosts-file", "/dev/stdin", "--json", stdin=f"# the board\n{host}\n".encode())
    else:
        r, w = os.pipe()
        os.write(w, f"{host}\n".encode())
        os.close(w)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "q25deploy", *argv, "--hosts-file", f"/dev/fd/{r}", "--json"],
                capture_output=True,
                timeout=120,
                pass_fds=(r,),
            )
        finally:
            os.close(r)
    assert proc.returncode == 0, proc
    assert [r["host"] for r in json.loads(proc.stdout)] == [host]
