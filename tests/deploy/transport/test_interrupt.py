"""Ctrl-C as a terminal sends it (SIGINT to the whole process group) during a real deploy:
``q25deploy deploy`` runs as a child in its own process group on a pty, to a real sshd behind
a slow link (:class:`sshd.SlowProxy`: the upload lasts), and the SIGINT goes to the group,
its ``ssh`` children included, while the release is being sent."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deploy_helpers import INSTALL, board_argv, deploy, wrapped_board
from sshd import SlowProxy

# each test races a SIGINT against a real transfer or command and bounds the time to the exit:
# that part alone, under two workers too (the other worker's load let an upload finish before its
# Ctrl-C); the deploys that set a board up and check it after share the machine. Waiting to be
# alone lasts up to the other worker's test (a BitBake or board test in the full run): the board
# tier's limit, not the quick tier's
pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[3]
# bytes/s per connection: B's release (> 3 MiB) takes > 3 s to send. Where the session is one ssh
# master (auto) the files share its connection, and what is in flight on it (up to the channel's
# window, 2 MiB) goes before the clean-up's command: at 256 KiB/s that alone was 8 s
RATE = 1 << 20


class Child:
    """``q25deploy ARGV`` in a process group of its own (as a terminal's foreground job), its
    output on a pty; ``text`` what it printed."""

    def __init__(self, argv: list[str], home: Path) -> None:
        master, slave = pty.openpty()
        env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "COLUMNS": "160"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "q25deploy", *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=home,
            start_new_session=True,
        )
        os.close(slave)
        self.master, self.out = master, bytearray()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while data := os.read(self.master, 65536):
                self.out += data
        except OSError:
            pass

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")

    def interrupt(self) -> None:
        """What a terminal's Ctrl-C does: SIGINT to the foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            time.sleep(0.2)  # the last output off the pty

    def stop(self) -> tuple[int, float]:
        """Ctrl-C, then wait: the exit status and the seconds from the SIGINT to the exit."""
        t0 = time.monotonic()
        self.interrupt()
        rc = self.wait()
        return rc, time.monotonic() - t0


def _figure(line: str) -> None:
    """A measured time, also into $Q25_INTERRUPT_TIMES (the notes' figures)."""
    print(line)
    if os.environ.get("Q25_INTERRUPT_TIMES"):
        with open(os.environ["Q25_INTERRUPT_TIMES"], "a") as f:
            f.write(line + "\n")


def _slow_deploy(tmp_path: Path, ssh, server, root: Path, build: Path, *extra: str) -> tuple[Child, SlowProxy]:
    proxy = SlowProxy(server.port, RATE)
    kh = tmp_path / "kh_slow"
    kh.write_text(server.host_line.replace(f"]:{server.port}", f"]:{proxy.port}") + "\n")
    argv = board_argv("deploy", ssh, server, root, "--build", str(build), "--allow-unreserved", *extra, known_hosts=kh)
    argv[argv.index("--host") + 1] = argv[argv.index("--host") + 1].replace(f":{server.port}", f":{proxy.port}")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return Child(argv, home), proxy


def _until(ready, child: Child, step: float = 0.02) -> None:
    """Wait (60 s at most) for ``ready()``, the child still running."""
    deadline = time.monotonic() + 60
    while not ready():
        assert child.proc.poll() is None and time.monotonic() < deadline, child.text
        time.sleep(step)


def _wrapped_on_a(tmp_path, capsys, ssh, models, q25tok, name: str, scripts: dict):
    """A wrapped board (``scripts``) that runs A: (its sshd, the remote root, A's id, the install dir)."""
    board = wrapped_board(tmp_path, ssh, name, scripts)
    root = tmp_path / "board"
    code, res, err = deploy(capsys, ssh, board, root, models["A"], runtime=q25tok)
    assert code == 0, err
    (tmp_path / "home").mkdir(exist_ok=True)
    return board, root, res[0]["release"], root / INSTALL


def _while_sending(child: Child, proxy: SlowProxy, base: Path) -> None:
    """Until the release is on its way: a staging directory, and 512 KiB through the link."""
    _until(lambda: proxy.forwarded > (512 << 10) and list((base / "releases").glob(".incoming-*")), child)


def _ctrl_c_while_sending(child: Child, proxy: SlowProxy, base: Path) -> tuple[int, float]:
    """Ctrl-C once the release is on its way: the exit status, and the seconds to it."""
    try:
        _while_sending(child, proxy, base)
        return child.stop()
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        proxy.close()


# a board's worker takes the SIGINT (the kernel may give it to any thread), then works on for 5 s
SIGINT_ON_A_WORKER = """
import os, signal, threading, time
from concurrent.futures import ThreadPoolExecutor
from q25deploy.deploy.transport import interrupt

def board():
    time.sleep(0.3)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    time.sleep(5)

pool = ThreadPoolExecutor(1)
futures = [pool.submit(board)]
t0 = time.monotonic()
try:
    interrupt.results(futures)
    print("not interrupted")
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - t0:.2f} s", flush=True)
os._exit(0)  # not waiting for the board's thread
"""


@pytest.mark.solo
def test_a_sigint_that_lands_on_a_board_thread_stops_the_wait_at_once():
    """The main thread's wait for the boards looks at a pending SIGINT every slice: in the
    fresh-clone run a Ctrl-C during one board's upload was acted on once the deploy had ended."""
    out = subprocess.run(
        [sys.executable, "-c", SIGINT_ON_A_WORKER],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    words = out.stdout.split()
    assert out.returncode == 0 and words[0] == "interrupted", (out.stdout, out.stderr)
    assert float(words[2]) < 0.3 + 1, out.stdout


@pytest.mark.parametrize("transfer", ["auto", "openssh"])
def test_ctrl_c_during_the_upload_leaves_the_board_on_its_release_and_says_so(
    tmp_path, capsys, ssh, models, q25tok, transfer, alone
):
    """The acceptance: the board stays on A with nothing staged, each board's line says so, and
    the command ends in 130 within 5 s of the SIGINT; the ``ssh`` children that the group's SIGINT
    reaches are the interrupt, not a lost connection (exit 13). ``auto``: the session is one
    ``ssh`` master; ``openssh``: paramiko's session, the files through ``ssh``."""
    srv, root = ssh["servers"][2], tmp_path / "board"
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0, err
    release_a, base = res[0]["release"], root / INSTALL
    with alone():
        child, proxy = _slow_deploy(
            tmp_path, ssh, srv, root, models["B"], "--runtime-bin", str(q25tok), "--transfer", transfer
        )
        rc, took = _ctrl_c_while_sending(child, proxy, base)
    _figure(f"SIGINT to exit, --transfer {transfer}: {took:.2f} s")
    assert rc == 130, child.text
    assert took <= 5, (took, child.text)
    assert f"not changed: still on {release_a}" in child.text, child.text
    assert "connection lost" not in child.text and "exited with 255" not in child.text, child.text
    assert os.readlink(base / "current") == f"releases/{release_a}"
    assert json.loads((base / ".q25deploy-state.json").read_text())["current"] == release_a
    assert sorted(p.name for p in (base / "releases").iterdir()) == [release_a]  # nothing staged is left
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="status")
    assert code == 0 and res[0]["current"] == release_a and res[0]["consistent"]


def test_ctrl_c_as_json_says_per_board_it_was_not_changed(tmp_path, capsys, ssh, models, q25tok, alone):
    srv, root = ssh["servers"][2], tmp_path / "board"
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    base = root / INSTALL
    with alone():
        child, proxy = _slow_deploy(tmp_path, ssh, srv, root, models["B"], "--runtime-bin", str(q25tok), "--json")
        rc, _ = _ctrl_c_while_sending(child, proxy, base)
    assert rc == 130, child.text
    start = child.text.index("[")
    (r,) = json.loads(child.text[start : child.text.rindex("]") + 1])
    assert r["interrupted"] is True and r["state"] == "not changed" and not r["ok"], r


# a board whose rm of a staging directory hangs, and then fails, once the test says so: the first
# Ctrl-C's clean-up then lasts, and the second Ctrl-C must end the command at once (the hang
# outlasts the second Ctrl-C's bound several times; the next run waits for the board's lock it holds)
SLOW_RM = (
    'case "$*" in *.incoming-*) [ -e "$SLOW_RM_FLAG" ] && { touch "$SLOW_RM_FLAG.blocked"; sleep 8; exit 1; } ;; esac\n'
    'exec /bin/rm "$@"\n'
)


def test_a_second_ctrl_c_ends_at_once_and_the_next_run_cleans_up(tmp_path, capsys, ssh, models, q25tok, alone):
    flag = tmp_path / "slow-rm"
    scripts = {"rm": SLOW_RM.replace("$SLOW_RM_FLAG", str(flag))}
    board, root, release_a, base = _wrapped_on_a(tmp_path, capsys, ssh, models, q25tok, "slowrm", scripts)
    try:
        with alone():
            child, proxy = _slow_deploy(tmp_path, ssh, board, root, models["B"], "--runtime-bin", str(q25tok))
            try:
                _while_sending(child, proxy, base)
                flag.touch()
                child.interrupt()
                _until(Path(f"{flag}.blocked").exists, child)  # the first is acted on: its clean-up hangs
                rc, took = child.stop()
            finally:
                if child.proc.poll() is None:
                    child.proc.kill()
                proxy.close()
        _figure(f"second SIGINT to exit: {took:.2f} s")
        assert rc == 130 and took < 1.5, (rc, took, child.text)
        assert os.readlink(base / "current") == f"releases/{release_a}"
        assert list((base / "releases").glob(".incoming-*")), "the hung clean-up left the staging directory"
        flag.unlink()
        # the next run, even one with nothing to send (A is current), removes what was left
        code, res, err = deploy(capsys, ssh, board, root, models["A"], runtime=q25tok)
        assert code == 0 and res[0]["ok"], (err, res)
        assert not list((base / "releases").glob(".incoming-*"))
        assert any("which an earlier run left" in w for w in res[0]["warnings"]), res[0]["warnings"]
        code, res, err = deploy(capsys, ssh, board, root, models["B"], runtime=q25tok)
        assert code == 0 and res[0]["ok"] and res[0]["previous"] == release_a, (err, res)
    finally:
        board.stop()


# a board whose every command hangs once the test says so (its `timeout`, which runs each one)
SLOW_COMMANDS = '[ -e "$FLAG" ] && { touch "$FLAG.blocked"; sleep 30; }\nexec /usr/bin/timeout "$@"\n'


def test_ctrl_c_during_smoke_stops_a_command_in_progress_and_says_it_was_not_tested(
    tmp_path, capsys, ssh, models, q25tok, alone
):
    """smoke changes nothing: Ctrl-C ends its board commands at once (on main the dying ssh
    children were a lost connection, exit 13)."""
    flag = tmp_path / "slow"
    scripts = {"timeout": SLOW_COMMANDS.replace("$FLAG", str(flag))}
    board, root, _, _ = _wrapped_on_a(tmp_path, capsys, ssh, models, q25tok, "slowcmd", scripts)
    try:
        flag.touch()
        with alone():
            child = Child(board_argv("smoke", ssh, board, root, "--build", str(models["A"])), tmp_path / "home")
            try:
                _until(Path(f"{flag}.blocked").exists, child)
                rc, took = child.stop()
            finally:
                if child.proc.poll() is None:
                    child.proc.kill()
        _figure(f"SIGINT to exit, smoke with a board command in progress: {took:.2f} s")
        assert rc == 130 and took <= 5, (rc, took, child.text)
        assert "interrupted: not changed (not tested)" in child.text, child.text
        assert "connection lost" not in child.text, child.text
    finally:
        board.stop()


# a board whose next command, once the test says so, takes 2 s (one command: the flag is taken)
ONE_SLOW_COMMAND = (
    '[ -e "$FLAG" ] && /bin/rm "$FLAG" 2>/dev/null && { touch "$FLAG.blocked"; sleep 2; }\nexec /usr/bin/timeout "$@"\n'
)


def test_ctrl_c_after_the_switch_completes_that_board_and_says_so(tmp_path, capsys, ssh, models, q25tok, alone):
    """Once the switch to B has begun the board completes it (and its load and smoke test, which
    roll back a bad release) rather than stop between them, and its line says so."""
    flag = tmp_path / "slow"
    scripts = {"timeout": ONE_SLOW_COMMAND.replace("$FLAG", str(flag))}
    board, root, release_a, base = _wrapped_on_a(tmp_path, capsys, ssh, models, q25tok, "oneslow", scripts)
    try:
        argv = board_argv("deploy", ssh, board, root, "--build", str(models["B"]), "--allow-unreserved")
        with alone():
            child = Child([*argv, "--runtime-bin", str(q25tok)], tmp_path / "home")
            try:
                _until(lambda: os.readlink(base / "current") != f"releases/{release_a}", child, 0.005)
                flag.touch()  # switched: the next command lasts, and Ctrl-C comes during it
                _until(Path(f"{flag}.blocked").exists, child, 0.01)
                child.interrupt()
                rc = child.wait()
            finally:
                if child.proc.poll() is None:
                    child.proc.kill()
        release_b = os.readlink(base / "current").split("/")[-1]
        assert rc == 130, child.text
        assert f"switched to {release_b}: completed the switch before stopping" in child.text, child.text
        assert json.loads((base / ".q25deploy-state.json").read_text())["current"] == release_b
        assert not (base / ".q25deploy-intent.json").exists()
    finally:
        board.stop()
