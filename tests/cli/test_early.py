"""The logins a board command starts as soon as argparse has accepted its command line
(q25deploy/cli/early.py), against a real sshd: the command adopts a login it would make
itself (one login in all) and ends one it would not; a command line the parser refuses,
or ``status --svg``, starts none."""

from __future__ import annotations

import json
import time

import pytest
from sshd import USER, SSHServer, board_command, keygen

from q25deploy.cli import early, main
from q25deploy.cli.main import build_parser


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    d = tmp_path_factory.mktemp("early")
    key = keygen(d / "client")
    srv = SSHServer(d / "sshd", key)
    yield srv, key, srv.known_hosts(d / "known_hosts"), d
    srv.stop()


def _argv(srv, key, kh, root, *extra):
    return board_command("status", srv.port, key, kh, root, "--json", *extra)


def _logins(srv) -> int:
    time.sleep(0.3)  # a login started is in the log well within this
    return (srv.dir / "sshd.log").read_bytes().count(b"Accepted publickey")


@pytest.fixture
def started(monkeypatch) -> list[dict]:
    """Every set of early logins the command started (the real function, watched)."""
    seen: list[dict] = []
    real = early.begin_logins

    def watched(a):
        logins = real(a)
        seen.append({name: login.master.proc for name, login in logins.items()})
        return logins

    monkeypatch.setattr(early, "begin_logins", watched)
    return seen


def test_the_command_adopts_its_early_login(board, capsys, started):
    srv, key, kh, d = board
    before = _logins(srv)
    capsys.readouterr()
    assert main(_argv(srv, key, kh, d / "root")) == 0
    assert json.loads(capsys.readouterr().out)[0]["consistent"]
    ((name, proc),) = started[0].items()
    assert name == f"{USER}@127.0.0.1:{srv.port}"
    assert proc.wait(timeout=10) is not None  # ended with the session
    assert _logins(srv) == before + 1  # the early login was the session's: no second one


def test_a_login_the_command_would_not_make_is_ended(board, capsys, monkeypatch):
    """A login another key made (as a plugin's board file or the resolved target may change
    what the command wants): ended, and the command logs in itself."""
    srv, key, kh, d = board
    other = keygen(d / "other")
    stray = early.begin_logins(build_parser(False).parse_args(_argv(srv, other, kh, d / "root")))
    stray_proc = next(iter(stray.values())).master.proc
    monkeypatch.setattr(early, "begin_logins", lambda a: stray)
    before = _logins(srv)
    capsys.readouterr()
    assert main(_argv(srv, key, kh, d / "root")) == 0 and not stray
    assert json.loads(capsys.readouterr().out)[0]["consistent"]
    assert stray_proc.wait(timeout=10) is not None
    assert _logins(srv) == before + 1  # its own


@pytest.mark.parametrize(
    "extra", [["--jobs", "0"], ["--jobs", "x"], ["--become", "su"], ["--svg", "m.svg"], ["--bogus"]]
)
def test_nothing_logs_in_before_the_parser_and_the_checks_accept_the_command(board, capsys, started, extra):
    srv, key, kh, d = board
    before = _logins(srv)
    try:
        code = main(_argv(srv, key, kh, d / "root", *extra))
    except SystemExit as e:  # argparse's usage error
        code = e.code
    assert code == 2, capsys.readouterr()
    assert all(not s for s in started)  # none started: refused by the parser, or no login where a check fails
    assert _logins(srv) == before
