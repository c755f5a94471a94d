"""--become: a login that is not root gains root with ``sudo -n`` / ``doas -n`` for every board
command. The messages against what sudo and doas really print (seen on the emulated board,
where the real programs run: tests/deploy/emulated/test_board_nonroot.py); the prefix on
every command, the lock and the uploads included, through a real sshd whose ``sudo`` is a
recording stand-in."""

from __future__ import annotations

import pytest
from deploy_helpers import deploy, wrapped_board

from q25deploy.board.boardfile import BECOME_METHODS
from q25deploy.deploy.transport import become
from q25deploy.errors import UsageError


def test_the_prefixes_are_non_interactive():
    assert tuple(become.PREFIX) == BECOME_METHODS
    assert become.prefix("sudo") == ("sudo", "-n", "--") and become.prefix("doas") == ("doas", "-n", "--")
    assert become.prefix("none") == ()
    with pytest.raises(UsageError, match="none, sudo, doas"):
        become.prefix("su")


@pytest.mark.parametrize(
    "method, status, stderr, says",
    [
        ("sudo", 1, "sudo: a password is required\n", "add 'deploy ALL=(root) NOPASSWD: ALL' to /etc/sudoers.d/"),
        (
            "sudo",
            1,
            "Sorry, user deploy is not allowed to execute '/usr/bin/timeout 120 true' as root on kv260.\n",
            "deploy may not gain root with sudo",
        ),
        ("sudo", 1, "sudo: sorry, you must have a tty to run sudo\n", "remove 'Defaults requiretty'"),
        ("doas", 1, "doas: Authentication required\n", "add 'permit nopass deploy as root' to /etc/doas.conf"),
        ("doas", 1, "doas: Operation not permitted\n", "deploy may not gain root with doas"),
        ("doas", 127, "sh: doas: not found\n", "the board has no doas"),
        ("sudo", 1, "", "sudo -n failed (exit status 1)"),
    ],
)
def test_a_refusal_says_what_to_configure_in_one_line(method, status, stderr, says):
    text = become.refusal(method, "deploy", status, stderr)
    assert says in text and "\n" not in text
    assert stderr.strip() in text


def test_the_permission_hint_is_for_a_login_that_is_not_root_without_become():
    denied = "mkdir: can't create directory '/lib/firmware/': Permission denied"
    assert "--become sudo" in become.hint("petalinux", "none", denied)
    assert become.hint("root", "none", denied) == ""
    assert become.hint("petalinux", "sudo", denied) == ""
    assert become.hint("petalinux", "none", "No space left on device") == ""


SUDO = """printf '%s\\n' "$(printf '%s' "$*" | tr '\\n' ' ')" >> "{log}"  # one write: uploads run at once
[ "$1" = -n ] && [ "$2" = -- ] || {{ echo "sudo: not called with -n --" >&2; exit 1; }}
shift 2; exec "$@"
"""


def test_every_command_runs_behind_sudo_n(tmp_path, capsys, ssh, models, q25tok):
    log = tmp_path / "sudo.log"
    board = wrapped_board(tmp_path, ssh, "sudo", {"sudo": SUDO.format(log=log)})
    root = tmp_path / "board"
    try:
        code, res, _ = deploy(capsys, ssh, board, root, models["A"], "--become", "sudo", runtime=q25tok)
        assert code == 0 and res[0]["ok"], res
        calls = log.read_text().splitlines()
        code, res, _ = deploy(capsys, ssh, board, root, models["A"], "--become", "none", action="status")
        assert code == 0 and len(log.read_text().splitlines()) == len(calls)  # none: no sudo at all
    finally:
        board.stop()
    # the probe, the agent that holds the lock and runs every short command, one per file sent
    assert len(calls) == 2 + uploads(calls) and all(c.startswith("-n -- timeout ") for c in calls)
    assert any(".q25deploy.lock" in c and "serve" in c for c in calls)
    # who owns the install dir is listed by that holder, behind sudo, before it takes the lock (issue 44)
    assert calls[1].endswith(" ask") and ".q25deploy.lock" in calls[1]
    # the release's own q25tok, staged in the install dir, never receives as root (issue 33; this
    # board's image has no q25tok): it travels through the shell, then a private copy of it,
    # hashed in a directory mktemp made outside the install dir, receives the rest
    receives = [c.split(" receive ")[0] for c in calls if "/q25tok receive " in c]
    assert sum('tee "$1"' in c for c in calls) == 1 and receives, calls
    assert all("/q25tok." in r and str(root) not in r for r in receives), receives
    assert calls[0].startswith("-n -- timeout 120 true")  # the probe comes first


def uploads(calls) -> int:
    return sum('tee "$1"' in c or "/q25tok receive " in c for c in calls)


def test_a_board_that_asks_for_a_password_is_refused_before_anything_is_written(tmp_path, capsys, ssh, models, q25tok):
    board = wrapped_board(tmp_path, ssh, "doas", {"doas": 'echo "doas: Authentication required" >&2; exit 1\n'})
    root = tmp_path / "board"
    try:
        code, res, _ = deploy(capsys, ssh, board, root, models["A"], "--become", "doas", runtime=q25tok)
    finally:
        board.stop()
    assert code == 13 and not res[0]["ok"]
    assert "doas wants a password" in res[0]["error"] and "permit nopass" in res[0]["error"]
    assert not root.exists()  # refused at connect time: not even the lock was taken
