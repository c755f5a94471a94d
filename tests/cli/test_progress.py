"""Progress on a terminal: one line, rewritten in place; hosts deployed in parallel share it
(one field each with bytes and rate) instead of overwriting each other; nothing when stderr
is not a terminal."""

from __future__ import annotations

import threading
import time

from q25deploy.cli import progress


def frames(text: str) -> list[str]:
    return [f.split("] ", 1)[1] for f in text.split("\r\033[K") if "] " in f]


def test_parallel_hosts_share_one_line_with_their_bytes_and_rate(capsys):
    p = progress.Progress(enabled=True)
    hosts = [f"root@10.0.0.{i}:22" for i in range(3)]

    def send(host: str) -> None:
        for _ in range(20):
            p.sent(host, 1 << 20)
            time.sleep(0.02)

    threads = [threading.Thread(target=send, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.sent(hosts[0], 0)  # rate-limited frames: make sure a last one shows everything
    time.sleep(0.25)
    p.sent(hosts[0], 0)
    p.done()
    shown = frames(capsys.readouterr().err)
    assert shown and all("\n" not in f for f in shown)
    last = shown[-1]
    assert all(h in last for h in hosts) and last.count("MB/s") == 3 and "21.0 MB" in last


def test_a_step_shows_its_text_and_nothing_reaches_a_pipe(capsys):
    p = progress.Progress(enabled=True)
    p.step("smoke test")
    p.done()
    assert frames(capsys.readouterr().err) == ["smoke test"]
    quiet = progress.Progress(enabled=False)
    quiet.step("x")
    quiet.sent("h", 10)
    assert capsys.readouterr().err == ""
