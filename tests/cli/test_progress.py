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
from q25deploy.cli import progress_view as view
from q25deploy.cli.progress_view import Task, render, size, summary
from q25deploy.common import format_size

MiB = 1 << 20


def streamed(t: Task, seconds: float, rate: float, rel: str | None = None, t_start: float = 0.0, chunk: int = MiB):
    """``seconds`` of bytes at ``rate`` in ``chunk``s on a fake clock; the time after the last."""
    now, n = t_start, int(seconds * rate / chunk)
    for _ in range(n):
        now += chunk / rate
        t.add_bytes(now, chunk, rel)
    return now


def test_a_board_line_has_phase_bytes_of_total_rate_and_time_left():
    t = Task("root@kv260-1:22", phase="sending partitions", total=100 * MiB, began=0.0)
    now = streamed(t, 5.0, 5 * MiB)  # 25 MiB in 5 s
    (line,) = render([t], now=now, t0=0.0, width=120)
    assert line.split("  ")[0] == "root@kv260-1:22"
    assert "sending partitions" in line and "25.0 MiB of 100.0 MiB  25%" in line
    assert "5.0 MiB/s" in line and "0:15 left" in line  # 75 MiB at 5 MiB/s


def test_after_the_last_byte_the_rate_is_the_transfers_own():
    t = Task("h", phase="smoke test", total=100 * MiB, began=0.0)
    t.add_bytes(0.0, 0)
    streamed(t, 10.0, 10 * MiB)
    (line,) = render([t], now=60.0, t0=0.0, width=120)  # the smoke test takes its time: still 10 MiB/s
    assert "100%  10.0 MiB/s" in line


def test_a_finished_board_shows_done_and_100_percent_and_a_failed_one_why():
    ok = Task("a", phase="smoke test", sent=10, total=10, started=0.0, last=1.0, began=0.0, ended=2.0, ok=True)
    bad = Task("b", phase="smoke test", began=0.0, ended=1.0, ok=False)
    lines = render([ok, bad], now=3.0, t0=0.0)
    assert "done" in lines[0] and "100%" in lines[0] and "left" not in lines[0]
    assert "FAILED: smoke test" in lines[1]
    assert lines[2].startswith("2 of 2 done (1 failed)")


def test_fifty_boards_fit_a_bounded_view_with_their_totals():
    tasks = [Task(f"root@10.0.0.{i}:22", total=MiB) for i in range(50)]
    for t in tasks[:20]:  # 20 finished, 5 sending, 25 waiting
        t.began, t.started, t.last, t.sent, t.ended, t.ok = 0.0, 0.0, 1.0, MiB, 1.0, True
    for t in tasks[20:25]:
        t.began, t.started, t.sent, t.phase = 0.0, 0.0, MiB // 2, "sending"
    lines = render(tasks, now=2.0, t0=0.0, width=80, height=12)
    assert len(lines) == 12 and all(len(line) < 80 for line in lines)
    assert sum("sending" in line for line in lines) == 5  # every active board is shown
    assert lines[-1].startswith("20 of 50 done, 5 active") and "22.5 MiB of 50.0 MiB  45%" in lines[-1]


def test_names_and_phases_are_escaped_and_the_summary_counts():
    t = Task("evil\x1b[2Jhost", phase="x\x07", began=0.0, ended=2.0, ok=True)
    t.add_bytes(0.0, MiB)
    t.add_bytes(0.5, 2 * MiB)
    (line,) = render([t], now=2.0, t0=0.0)
    assert "\x1b" not in line and "\x07" not in line
    assert summary("deploy", [t], now=2.0, t0=0.0) == "deploy: done in 2.0 s; 3.0 MiB sent in 0.5 s at 6.0 MiB/s"


# issue 45, item 6: a progress line that reads right


def test_a_long_phase_or_file_name_is_whole_and_gives_way_in_the_middle_only_on_a_narrow_terminal():
    t = Task("root@kv260-1:22", phase="loading the partitions into reserved memory", began=0.0)
    (line,) = render([t], now=1.0, t0=0.0, width=120)
    assert "loading the partitions into reserved memory" in line  # was cut: "loading the partitions int"
    rel = "q25/tokenizer_runtime_image.bin"
    s = Task("root@kv260-1:22", total=8 * MiB, began=0.0)
    s.start_file(rel, 8 * MiB)
    (line,) = render([s], now=0.0, t0=0.0, width=120)
    assert f"sending {rel}" in line  # was "sending tokenizer_runtime_"
    (narrow,) = render([s], now=0.0, t0=0.0, width=60)
    assert len(narrow) <= 59 and "…" in narrow and "image.bin" in narrow and "sending" in narrow
    assert f"sending {rel}" not in narrow
    busy = Task("root@kv260-2:22", total=400 * MiB, began=0.0)
    streamed(busy, 4.0, 5 * MiB)  # long fields on its line: the other's label still fits its own
    lines = render([t, busy], now=4.0, t0=0.0, width=80)
    assert "loading the partitions into reserved memory" in lines[0] and all(len(x) <= 79 for x in lines)


def test_the_label_names_the_file_carrying_most_of_the_bytes_in_flight():
    t = Task("h", total=400 * MiB + 3000, began=0.0)
    t.start_file("model/partition0.bin", 400 * MiB)
    t.add_bytes(1.0, 10 * MiB, "model/partition0.bin")
    for small in ("a.json", "b.json", "c.json"):  # small files start after it: it still carries the bytes
        t.start_file(small, 1000)
    assert view.label(t) == "sending model/partition0.bin"
    u = Task("h", total=200 * MiB, began=0.0)
    u.start_file("p0.bin", 100 * MiB)
    u.start_file("p1.bin", 100 * MiB)
    assert view.label(u) == "sending 2 files"  # neither carries most


def test_the_rate_is_smoothed_and_the_time_left_waits_for_data_and_never_says_0_00():
    t = Task("h", total=100 * MiB, began=0.0)
    t.add_bytes(0.001, MiB)  # the first MiB fills a local pipe at once: no 1.0 GB/s, no 0:00 left
    (line,) = render([t], now=0.002, t0=0.0, width=120)
    assert "/s" not in line and "left" not in line
    now = streamed(t, 2.0, 4 * MiB, t_start=0.001)
    (line,) = render([t], now=now, t0=0.0, width=120)
    assert "/s" in line and "left" not in line  # a rate after a second, no time left before three
    now = streamed(t, 4.0, 4 * MiB, t_start=now)
    rates = []
    for step in range(40):  # a burst and a pause: the rate moves, it does not jump
        now = streamed(t, 0.1, 40 * MiB if step == 5 else 4 * MiB, t_start=now, chunk=MiB // 4)
        rates.append(view.live_rate(t, now))
    assert all(3.0 * MiB < r < 5.5 * MiB for r in rates), [r / MiB for r in rates]
    t.sent = t.total - 100  # 100 bytes left, at megabytes a second
    (line,) = render([t], now=now, t0=0.0, width=120)
    assert "0:01 left" in line and "0:00 left" not in line


def test_one_unit_family_binary_as_the_build_summary():
    assert size(1536) == "1.5 KiB" and size(374.2 * MiB) == "374.2 MiB" and size(3 << 30) == "3.0 GiB"
    assert format_size(3 << 30) == "3 GiB"  # the build's summary: the same units
    t = Task("h", total=10 * MiB, began=0.0)
    now = streamed(t, 2.0, 2 * MiB)
    (line,) = render([t], now=now, t0=0.0, width=120)
    assert "MiB of 10.0 MiB" in line and "MiB/s" in line and " MB" not in line and "kB" not in line


def test_the_summary_shows_the_rate_the_last_frame_showed():
    tasks = [Task("a", total=30 * MiB, began=0.0), Task("b", total=30 * MiB, began=0.0)]
    for t, start in zip(tasks, (2.0, 3.0)):  # logins first: the command started at 0
        t.add_bytes(start, 0)
        end = streamed(t, 6.0, 5 * MiB, t_start=start)
        t.ended, t.ok = end + 4.0, True  # verify, switch, load, smoke
    last = render(tasks, now=20.0, t0=0.0, width=120)
    line = summary("deploy", tasks, now=20.0, t0=0.0)
    shown = re.search(r"(\d+\.\d MiB/s)", last[-1]).group(1)  # the totals line
    assert line.endswith(f"60.0 MiB sent in 7.0 s at {shown}") and shown == "8.6 MiB/s"
    for frame in last[:2]:  # each board's own: bytes over its transfer time
        assert "30.0 MiB of 30.0 MiB 100%  5.0 MiB/s" in frame


def test_after_the_last_byte_the_line_shows_the_phase_that_follows():
    t = Task("h", total=8 * MiB, began=0.0)
    t.start_file("q25/runtime.img", 8 * MiB)
    streamed(t, 2.0, 4 * MiB, rel="q25/runtime.img")
    (line,) = render([t], now=2.5, t0=0.0, width=120)
    assert "100%" in line and "verifying q25/runtime.img" in line  # the board hashes and syncs it
    t.end_file("q25/runtime.img")
    t.phase = "switching to release c20d928f12303e95"
    (line,) = render([t], now=3.0, t0=0.0, width=120)
    assert "switching to release c20d928f12303e95" in line and "100%" in line


def test_the_display_redraws_in_place_and_leaves_the_summary(capsys):
    p = progress.Progress(enabled=True, stream=sys.stderr)
    with p.running("deploy"):
        p.add("h1", "h2")
        p.phase("h1", "connecting")
        p.total("h1", 2_000)
        p.sent("h1", 1_000)
        time.sleep(0.01)
        p.sent("h1", 1_000)
        p.finish("h1", True)
        p.finish("h2", False)
    err = capsys.readouterr().err
    assert "\033[J" in err and "\033[2A" in err  # the three lines drawn again, in place
    assert re.search(r"deploy: 1 of 2 ok, 1 failed in 0\.\d s; 2\.0 KiB sent in 0\.\d s at [\d.]+ [KM]iB/s\n$", err)
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
    assert re.search(r"deploy: done in \d+\.\d s; 38\.1 MiB sent in \d+\.\d s at", shown) and "TABLE" in shown
    piped = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert piped.stdout == "TABLE\n" and piped.stderr == ""


def test_quiet_and_json_silence_it_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert progress.wanted()
    assert not progress.wanted(quiet=True) and not progress.wanted(json=True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)  # `q25deploy deploy ... | cat`: only the table
    assert not progress.wanted()
