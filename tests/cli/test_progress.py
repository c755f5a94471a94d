"""Live progress: the renderer as a pure function (one line per board with phase, bytes of
total, rate and time left; a bounded view with a totals line at 50 boards; the summary), and
the display on a real pseudo-terminal reaching 100 %, silent on a pipe, with --json, --quiet."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from q25deploy.cli import progress
from q25deploy.cli.progress_view import Task, render, summary


def test_a_board_line_has_phase_bytes_of_total_rate_and_time_left():
    t = Task("root@kv260-1:22", phase="sending partitions", sent=25_000_000, total=100_000_000, started=0.0, began=0.0)
    (line,) = render([t], now=5.0, t0=0.0, width=120)
    assert line.split("  ")[0] == "root@kv260-1:22"
    assert "sending partitions" in line and "25.0 MB of 100.0 MB  25%" in line
    assert "5.0 MB/s" in line and "0:15 left" in line  # 75 MB at 5 MB/s


def test_after_the_last_byte_the_rate_is_the_transfers_own():
    t = Task("h", phase="smoke test", sent=100_000_000, total=100_000_000, started=0.0, last=10.0, began=0.0)
    (line,) = render([t], now=60.0, t0=0.0, width=120)  # the smoke test takes its time: still 10 MB/s
    assert "100%  10.0 MB/s" in line


def test_a_finished_board_shows_done_and_100_percent_and_a_failed_one_why():
    ok = Task("a", phase="smoke test", sent=10, total=10, started=0.0, began=0.0, ended=2.0, ok=True)
    bad = Task("b", phase="smoke test", began=0.0, ended=1.0, ok=False)
    lines = render([ok, bad], now=3.0, t0=0.0)
    assert "done" in lines[0] and "100%" in lines[0] and "left" not in lines[0]
    assert "FAILED: smoke test" in lines[1]
    assert lines[2].startswith("2 of 2 done (1 failed)")


def test_fifty_boards_fit_a_bounded_view_with_their_totals():
    tasks = [Task(f"root@10.0.0.{i}:22", total=1_000_000) for i in range(50)]
    for t in tasks[:20]:  # 20 finished, 5 sending, 25 waiting
        t.began, t.started, t.sent, t.ended, t.ok = 0.0, 0.0, 1_000_000, 1.0, True
    for t in tasks[20:25]:
        t.began, t.started, t.sent, t.phase = 0.0, 0.0, 500_000, "sending"
    lines = render(tasks, now=2.0, t0=0.0, width=80, height=12)
    assert len(lines) == 12 and all(len(line) < 80 for line in lines)
    assert sum("sending" in line for line in lines) == 5  # every active board is shown
    assert lines[-1].startswith("20 of 50 done, 5 active") and "22.5 MB of 50.0 MB  45%" in lines[-1]


def test_names_and_phases_are_escaped_and_the_summary_counts():
    t = Task("evil\x1b[2Jhost", phase="x\x07", began=0.0, ended=1.0, ok=True, sent=3_000_000)
    (line,) = render([t], now=1.0, t0=0.0)
    assert "\x1b" not in line and "\x07" not in line
    assert summary("deploy", [t], now=2.0, t0=0.0) == "deploy: done in 2.0 s; 3.0 MB sent at 1.5 MB/s"


def test_the_display_redraws_in_place_and_leaves_the_summary(capsys):
    p = progress.Progress(enabled=True, stream=sys.stderr)
    with p.running("deploy"):
        p.add("h1", "h2")
        p.phase("h1", "connecting")
        p.total("h1", 2_000)
        p.sent("h1", 2_000)
        p.finish("h1", True)
        p.finish("h2", False)
    err = capsys.readouterr().err
    assert "\033[J" in err and "\033[2A" in err  # the three lines drawn again, in place
    assert err.endswith("deploy: 1 of 2 ok, 1 failed in 0.0 s; 2.0 kB sent at " + err.rsplit(" at ", 1)[1])
    silent = progress.Progress(enabled=False)
    silent.phase("h", "x")
    silent.done("deploy")
    assert capsys.readouterr().err == ""


SCRIPT = """
import time
from q25deploy.cli.progress import Progress, wanted
p = Progress(enabled=wanted(), task="qemu")
with p.running("deploy"):
    p.add("root@127.0.0.1:2222")
    p.total("root@127.0.0.1:2222", 40_000_000)
    for _ in range(8):
        p.phase("root@127.0.0.1:2222", "sending")
        p.sent("root@127.0.0.1:2222", 5_000_000)
        time.sleep(0.15)
    p.finish("root@127.0.0.1:2222", True)
print("TABLE")
"""


def run_on_pty(argv: list[str]) -> str:
    """``argv`` with stdout and stderr on a pseudo-terminal; everything it wrote there."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 24 rows, 120 columns
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
    os.close(terminal)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if select.select([controller], [], [], 1)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other side closed
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(controller)
    return out.decode()


def test_on_a_terminal_progress_reaches_100_percent_and_a_pipe_sees_only_the_result():
    shown = run_on_pty([sys.executable, "-c", SCRIPT])
    frames = [f for f in re.split(r"\r|\n", shown) if "root@127.0.0.1:2222" in f]
    assert any("100%" in f for f in frames) and any(" 50%" in f or " 37%" in f or " 62%" in f for f in frames)
    assert re.search(r"deploy: done in \d+\.\d s; 40\.0 MB sent at", shown) and "TABLE" in shown
    piped = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert piped.stdout == "TABLE\n" and piped.stderr == ""


def test_quiet_and_json_silence_it_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert progress.wanted()
    assert not progress.wanted(quiet=True) and not progress.wanted(json=True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)  # `q25deploy deploy ... | cat`: only the table
    assert not progress.wanted()
