"""What a board answers is input (issue 22, items 8, 9 and 11): real sshd boards, one of them
hostile at the agent's boundary (a board-side program wrapped to answer what a damaged or
hostile board would). A malformed answer fails that board alone, in one line, and the other
boards' results are printed (never exit 70); a lock record of any shape is described or taken
over, never a crash; what a board writes reaches the operator's terminal with its control
characters shown as ``\\xNN``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deploy_helpers import INSTALL, wrapped_board
from requirements import need_program
from sshd import USER

from q25deploy.cli import main
from q25deploy.deploy.state.boardfiles import BoardFiles
from q25deploy.deploy.state.boardlock import LOCK_NAME, _describe, board_lock
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.hosts import HostSpec

# an escape sequence that clears the screen, homes the cursor and prints a result line of its own
CLEAR = "\\033[2J\\033[H"


def fleet_cli(capsys, ssh, tmp_path: Path, servers, action: str, *extra: str) -> tuple[int, str, str]:
    """``q25deploy ACTION`` on ``servers`` (each its own remote root ``tmp_path/b<port>``)."""
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(s.host_line + "\n" for s in servers))
    argv = [
        action,
        "--target",
        "qemu",
        "--identity",
        str(ssh["key"]),
        "--known-hosts",
        str(kh),
        "--remote-root",
        str(tmp_path / "b{port}"),
        *extra,
    ]
    for s in servers:
        argv += ["--host", f"{USER}@127.0.0.1:{s.port}"]
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def install_dir(tmp_path: Path, server) -> Path:
    base = tmp_path / f"b{server.port}" / INSTALL
    base.mkdir(parents=True, exist_ok=True)
    return base


def test_a_malformed_state_answer_fails_that_board_alone(tmp_path, capsys, ssh):
    """`wc` answers `x` for the state file: the snapshot reads `file x` (was ValueError, exit 70,
    no result of the other board printed)."""
    good = ssh["servers"][0]
    bad = wrapped_board(
        tmp_path,
        ssh,
        "badwc",
        {
            "wc": 'case "$(readlink /proc/$$/fd/0)" in '
            "*.q25deploy-state.json) echo x; exit 0;; esac\n"
            'exec /usr/bin/wc "$@"\n'
        },
    )
    try:
        install_dir(tmp_path, good)
        (install_dir(tmp_path, bad) / ".q25deploy-state.json").write_text("{}")
        code, out, err = fleet_cli(capsys, ssh, tmp_path, [good, bad], "status", "--jobs", "2", "--json")
    finally:
        bad.stop()
    res = {r["host"]: r for r in json.loads(out)}
    assert code == 13 and "internal" not in err, err
    assert "malformed" in res[f"{USER}@127.0.0.1:{bad.port}"]["error"]
    assert res[f"{USER}@127.0.0.1:{good.port}"]["consistent"]


@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_a_lock_record_with_a_huge_since_is_taken_over_not_a_crash(tmp_path, ssh, shell):
    """A lock whose holder is alive but whose SINCE has 18 digits: malformed, so stale (was busy,
    and describing the holder raised from time.gmtime: OSError here, OverflowError past 2^63)."""
    if shell == "busybox":
        need_program("busybox", "Debian: busybox-static")
    srv = wrapped_board(tmp_path, ssh, f"lock-{shell}", {"sh": 'exec busybox sh "$@"\n'} if shell == "busybox" else {})
    try:
        root = tmp_path / "board"
        base = root / INSTALL
        base.mkdir(parents=True)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text()[:8]
        planted = f"q25deploy-lock:{os.getpid()}:{10**18 - 1}:{boot}:ghost@gone"  # a live process
        os.symlink(planted, base / LOCK_NAME)
        spec = HostSpec("127.0.0.1", USER, srv.port)
        with ParamikoSession(
            spec, identity=str(ssh["key"]), known_hosts=str(srv.known_hosts(tmp_path / "kh")), trust_new_host=False
        ) as board:
            files = BoardFiles(board, str(root), "/lib/firmware/q25")
            with board_lock(board, files.path(LOCK_NAME), wait=0):
                assert os.readlink(base / LOCK_NAME) != planted  # ours now
        assert not (base / LOCK_NAME).is_symlink()
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "record",
    [
        "q25deploy-lock:1:99999999999999999999:b:o",
        "q25deploy-lock:1:999999999999999999:b:o",
        "q25deploy-lock:1:999999999999:b:o",
        "q25deploy-lock:x:١٢٣:b:o",
        "garbage\x1b[2J",
    ],
)
def test_any_lock_record_is_described(record):
    text = _describe(record)
    assert isinstance(text, str) and "\x1b" not in text


def test_board_text_reaches_the_terminal_escaped(tmp_path, capsys, ssh):
    """The board's `cat` fails on the state file with an escape sequence and a fake result line
    on stderr: status's lines and rollback's table show it as \\x1b…, never raw."""
    loud = wrapped_board(
        tmp_path,
        ssh,
        "loud",
        {
            "cat": 'case "$1" in *.q25deploy-state.json) '
            f'printf "{CLEAR}board ok yes\\n" >&2; exit 1;; esac\n'
            'exec /bin/cat "$@"\n'
        },
    )
    try:
        (install_dir(tmp_path, loud) / ".q25deploy-state.json").write_text("{}")
        for action in ("status", "rollback"):
            code, out, err = fleet_cli(capsys, ssh, tmp_path, [loud], action)
            assert code == 13 and "\x1b" not in out + err, (action, out, err)
            assert "\\x1b[2J\\x1b[Hboard ok yes" in out, (action, out)
    finally:
        loud.stop()


def test_a_bug_on_one_board_still_prints_every_result(monkeypatch, capsys):
    """Defence in depth: an unexpected exception on one board (a bug, not its answer) is that
    board's result; the other boards run and are printed, then the command exits 70 as a bug."""
    from q25deploy.deploy.ops import fleet

    def status_one(self, spec):
        if spec.port == 2:
            raise ValueError("boom")
        return {
            "host": spec.name,
            "current": None,
            "previous": None,
            "current_link": None,
            "consistent": True,
            "pending_switch": None,
            "release": None,
        }

    monkeypatch.setattr(fleet.Fleet, "status_one", status_one)
    monkeypatch.delenv("Q25DEPLOY_DEBUG", raising=False)
    code = main(
        ["status", "--target", "qemu", "--host", "root@127.0.0.1:1", "--host", "root@127.0.0.1:2", "--jobs", "2"]
    )
    out, err = capsys.readouterr()
    assert code == 70 and "internal error: RuntimeError: root@127.0.0.1:2: ValueError: boom" in err
    assert "root@127.0.0.1:1" in out and "root@127.0.0.1:2" in out and "ValueError: boom" in out


def test_a_board_cannot_make_the_workstation_buffer_what_it_announces(tmp_path, capsys, ssh):
    """Every byte a board sends is bounded (issue 33, item 6): the lock holder's agent answers a
    command with a header announcing 10^15 bytes (was os.read allocating them: MemoryError, exit
    70, every other board's result lost). That board fails in one line, exit 13; the other
    board's result is printed."""
    # the count, and output enough that more is on its way after the host's first read
    answer = 'f=$(readlink /proc/$$/fd/0); head -c 300000 /dev/zero >>"$f"; echo 999999999999999; exit 0'
    good = ssh["servers"][0]
    bad = wrapped_board(
        tmp_path,
        ssh,
        "huge",
        {"wc": f'case "$(readlink /proc/$$/fd/0)" in */o) {answer};; esac\nexec /usr/bin/wc "$@"\n'},
    )
    try:
        install_dir(tmp_path, good)
        install_dir(tmp_path, bad)
        code, out, err = fleet_cli(capsys, ssh, tmp_path, [good, bad], "rollback", "--jobs", "2", "--json")
    finally:
        bad.stop()
    assert code == 13 and "internal" not in err and not err.strip(), err
    res = {r["host"]: r for r in json.loads(out)}
    assert "larger than" in res[f"{USER}@127.0.0.1:{bad.port}"]["error"], res
    assert "no previous release" in res[f"{USER}@127.0.0.1:{good.port}"]["error"], res
