"""The logins a board command starts before its modules load (q25deploy/cli/early.py): the
scan reads only what argparse would read the same way, and the command adopts a login it
would make itself and ends one it would not, against a real sshd."""

from __future__ import annotations

import argparse
import json

import pytest
from sshd import USER, SSHServer, board_command, keygen

from q25deploy.cli import early, main
from q25deploy.cli.main import build_parser


def _options(command: str) -> dict[str, bool]:
    """The parser's long options of ``command``: option → takes a value."""
    sub = next(a for a in build_parser(False)._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for action in sub.choices[command]._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt != "--help":
                out[opt] = action.nargs != 0
    return out


def test_the_scan_knows_each_board_commands_options_as_the_parser_does():
    """Per command (issue 33, item 7): ``status --transfer`` or ``deploy --quick`` is not a
    command the scan reads, so nothing logs in before argparse refuses it."""
    for command in early.COMMANDS:
        valued, flags = early.OPTIONS[command]
        mine = _options(command)
        assert {o for o, v in mine.items() if v} == valued and {o for o, v in mine.items() if not v} == flags, command
    sub = next(a for a in build_parser(False)._actions if isinstance(a, argparse._SubParsersAction))
    jobs = next(a for a in sub.choices["status"]._actions if "--jobs" in a.option_strings)
    assert jobs.default == early.DEFAULT_JOBS


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--target", "qemu"],
        ["status", "--tar", "qemu", "--host", "h"],  # an abbreviation argparse would take
        ["status", "--target", "qemu", "-h"],
        ["status", "--target", "qemu", "--host", "--json"],  # a value that is an option
        ["status", "--target", "qemu", "--", "--host", "h"],
        ["deploy", "some-positional"],
        ["status", "--target", "qemu", "--host", "h", "--transfer", "auto"],  # another command's option
        ["deploy", "--target", "qemu", "--host", "h", "--quick"],
        ["smoke", "--target", "qemu", "--host", "h", "--svg", "x"],
    ],
)
def test_the_scan_starts_nothing_where_argparse_may_read_otherwise(argv):
    assert early.scan(argv) is None and early.begin_logins(argv) == {}


def test_the_scan_reads_both_spellings():
    opts = early.scan(["status", "--target=qemu", "--host", "a", "--host=b:2", "--json", "--jobs", "2"])
    assert opts == {"--host": ["a", "b:2"], "--target": "qemu", "--jobs": "2", "--json": True}


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    d = tmp_path_factory.mktemp("early")
    key = keygen(d / "client")
    srv = SSHServer(d / "sshd", key)
    yield srv, key, srv.known_hosts(d / "known_hosts"), d
    srv.stop()


def _argv(srv, key, kh, root, *extra):
    return board_command("status", srv.port, key, kh, root, "--json", *extra)


def test_the_command_adopts_the_early_login_and_ends_one_it_would_not_make(board, capsys):
    srv, key, kh, d = board
    argv = _argv(srv, key, kh, d / "root")
    started = early.begin_logins(argv)
    assert list(started) == [f"{USER}@127.0.0.1:{srv.port}"]
    master = started[next(iter(started))]
    proc = master.master.proc
    capsys.readouterr()
    assert main(argv, early=started) == 0
    assert json.loads(capsys.readouterr().out)[0]["consistent"] and not started  # adopted
    assert proc.wait(timeout=10) is not None  # and ended with the session
    # a login another key made is not this command's: ended, and the command logs in itself
    other = keygen(d / "other")
    stray = early.begin_logins(_argv(srv, other, kh, d / "root"))
    stray_proc = next(iter(stray.values())).master.proc
    assert main(argv, early=stray) == 0 and not stray
    assert stray_proc.wait(timeout=10) is not None
    # a command that fails its own checks ends the logins it was given
    pending = early.begin_logins(argv)
    pending_proc = next(iter(pending.values())).master.proc
    with pytest.raises(SystemExit):
        main([*argv, "--jobs", "0"], early=pending)
    assert not pending and pending_proc.wait(timeout=10) is not None
