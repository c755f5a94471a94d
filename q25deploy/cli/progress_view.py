"""What the progress display shows, as a pure function of its state: one line per board (or
per task: a build, a package) with its phase, bytes sent of the total, rate and time left; at
more boards than fit, the active ones and a totals line; and the summary once all is done.

No I/O and no clock here (:mod:`.progress` writes the lines and passes ``now``); every name
and phase is escaped (a hosts file, a board's answer may carry escape sequences).

- **Units**: binary (IEC) everywhere, as the build's summary: KiB, MiB, GiB (2^10, 2^20,
  2^30 bytes) and MiB/s.
- **The label** names the file carrying most of the bytes in flight (more than half of what
  the files in flight have left), else ``sending N files``; once a file's bytes are all out,
  ``verifying`` it (the board hashes and syncs it before it answers), then the phase that
  follows (switching, loading, smoke test) as the deploy reports it. A label is never cut:
  the middle of it gives way (``…``) only when the line is wider than the terminal.
- **The rate**: live, an exponential moving average of the bytes sent (time constant
  :data:`TAU`, corrected for its start), shown after :data:`RATE_AFTER` seconds of data, the
  time left after :data:`LEFT_AFTER` and never ``0:00`` while bytes remain. Once the bytes
  are out, and in the summary, the rate is the transfer's: bytes sent over the transfer time
  (first byte to last byte, of any board), so the last frame and the summary agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..common import printable

TAU = 3.0  # the moving average's time constant, seconds
RATE_AFTER = 1.0  # seconds of data before a rate is shown
LEFT_AFTER = 3.0  # ... and before a time left is
STALL = 1.0  # no bytes for longer than this: the live rate decays
MIN_LABEL = 12  # a label shortened in the middle keeps at least this much


@dataclass
class Task:
    """One board's (or one task's) progress; the methods take the time (``now``)."""

    name: str
    phase: str = "waiting"
    sent: int = 0
    total: int = 0  # bytes planned (0: not known, or nothing to send)
    started: float | None = None  # first byte
    last: float | None = None  # latest byte
    began: float | None = None  # first phase
    ended: float | None = None
    ok: bool | None = None
    flows: dict[str, list[int]] = field(default_factory=dict)  # file in flight -> [size, sent]
    ema: float = 0.0  # the moving average of the rate, at ``last``

    def add_bytes(self, now: float, n: int, rel: str | None = None) -> None:
        if self.started is None:  # the first bytes start the clock: they have no interval of their own
            self.started = now
        else:
            dt = now - (self.last if self.last is not None else now)
            decay = math.exp(-dt / TAU)
            self.ema = self.ema * decay + n * ((1 - decay) / dt if dt > 1e-9 else 1 / TAU)
        self.last = now
        self.sent += n
        if rel is not None and rel in self.flows:
            self.flows[rel][1] += n

    def start_file(self, rel: str, size: int) -> None:
        self.flows[rel] = [size, 0]

    def end_file(self, rel: str) -> None:
        self.flows.pop(rel, None)


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover (the loop returns)


def duration(seconds: float) -> str:
    s = max(0, int(seconds + 0.5))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def time_left(seconds: float) -> str:
    """At least a second: never ``0:00`` while bytes remain."""
    return duration(max(1.0, seconds))


def live_rate(t: Task, now: float) -> float:
    """The moving average (0: too little data yet to say)."""
    if t.started is None or t.last is None or now - t.started < RATE_AFTER:
        return 0.0
    warm = 1 - math.exp(-(t.last - t.started) / TAU)
    if warm <= 0:
        return 0.0
    return t.ema / warm * math.exp(-max(0.0, now - t.last - STALL) / TAU)


def transfer_rate(sent: int, first: float | None, last: float | None) -> float:
    """Bytes over the transfer time, first byte to last (the summary's rate)."""
    return sent / (last - first) if first is not None and last is not None and last > first else 0.0


def sending(t: Task) -> bool:
    return t.ended is None and t.sent < t.total


def label(t: Task) -> str:
    """The phase: the file carrying most of the bytes in flight, or how many, or their check."""
    if t.ok is not None:
        return "done" if t.ok else f"FAILED: {t.phase}"
    if not t.flows:
        return t.phase
    left = {rel: s - n for rel, (s, n) in t.flows.items() if s > n}
    if not left:  # every byte out: the board hashes and syncs before it answers
        return f"verifying {next(iter(t.flows))}" if len(t.flows) == 1 else f"verifying {len(t.flows)} files"
    rel, most = max(left.items(), key=lambda kv: kv[1])
    return f"sending {rel}" if len(left) == 1 or most * 2 > sum(left.values()) else f"sending {len(left)} files"


def _bytes_fields(sent: int, total: int, rate: float, left_too: bool) -> str:
    if not total and not sent:
        return ""
    shown = f"  {size(rate)}/s" if rate else ""
    if not total:
        return f"{size(sent)}{shown}"
    pct = min(100, sent * 100 // total)
    left = f"  {time_left((total - sent) / rate)} left" if rate and left_too and sent < total else ""
    return f"{size(sent)} of {size(total)} {pct:3d}%{shown}{left}"


def task_fields(t: Task, now: float) -> str:
    """``SENT of TOTAL  PCT%  RATE  TIME left`` (or the elapsed time without bytes)."""
    end = t.ended if t.ended is not None else now
    if sending(t):
        rate = live_rate(t, now)
        left_too = t.started is not None and now - t.started >= LEFT_AFTER
    else:  # the bytes are out: the transfer's own rate, as the summary
        rate, left_too = transfer_rate(t.sent, t.started, t.last), False
    fields = _bytes_fields(t.sent, t.total, rate, left_too)
    if not fields and t.began is not None:
        fields = duration(end - t.began)
    return fields


def shorten(text: str, width: int) -> str:
    """``text`` in ``width`` columns: the middle gives way to ``…`` (the file name at the end stays)."""
    if len(text) <= width:
        return text
    width = max(width, MIN_LABEL)
    verb = len(text.split(" ", 1)[0]) + 1  # "sending ", "verifying ": whole where they fit
    head = verb if verb <= (width - 1) // 2 else (width - 1) // 3
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def totals_line(tasks: Sequence[Task], now: float, t0: float) -> str:
    done = [t for t in tasks if t.ended is not None]
    failed = sum(1 for t in done if t.ok is False)
    active = sum(1 for t in tasks if t.ended is None and t.began is not None)
    sent, total = sum(t.sent for t in tasks), sum(t.total for t in tasks)
    live = [t for t in tasks if sending(t)]
    if live:
        rate = sum(live_rate(t, now) for t in live)
        left_too = all(t.started is not None and now - t.started >= LEFT_AFTER for t in live)
    else:
        rate, left_too = _span_rate(tasks), False
    head = f"{len(done)} of {len(tasks)} done" + (f" ({failed} failed)" if failed else "")
    head += f", {active} active" if active else ""
    fields = _bytes_fields(sent, total, rate, left_too)
    return f"{head}{'  ' + fields if fields else ''}  {duration(now - t0)}"


def _span(tasks: Sequence[Task]) -> tuple[float | None, float | None]:
    firsts = [t.started for t in tasks if t.started is not None]
    lasts = [t.last for t in tasks if t.last is not None]
    return (min(firsts) if firsts else None), (max(lasts) if lasts else None)


def _span_rate(tasks: Sequence[Task]) -> float:
    return transfer_rate(sum(t.sent for t in tasks), *_span(tasks))


def render(tasks: Sequence[Task], now: float, t0: float, *, width: int = 100, height: int = 12) -> list[str]:
    """The lines to show (each at most ``width - 1`` columns, at most ``height`` of them):
    every task while they fit, else the active ones first (then the last finished) and a
    totals line; a totals line too whenever there is more than one task."""
    height = max(height, 2)
    name_width = min(max((len(t.name) for t in tasks), default=0), 32)
    if len(tasks) <= (height - 1 if len(tasks) > 1 else height):
        shown = list(tasks)
    else:
        active = [t for t in tasks if t.ended is None and t.began is not None]
        ended = sorted((t for t in tasks if t.ended is not None), key=lambda t: -(t.ended or 0))
        shown = (active + ended)[: height - 1]
        shown.sort(key=lambda t: tasks.index(t))
    rows = [(t.name, printable(label(t)), task_fields(t, now)) for t in shown]
    room = width - 1 - name_width - 4 - max((len(f) for _, _, f in rows), default=0)
    phase_width = min(max((len(p) for _, p, _ in rows), default=0), max(room, MIN_LABEL))
    lines = []
    for name, phase, fields in rows:  # each label shortened only as far as its own line needs
        own = shorten(phase, max(width - 1 - name_width - 4 - len(fields), MIN_LABEL))
        lines.append(printable(f"{name:<{name_width}}  ") + f"{own:<{phase_width}}  {fields}".rstrip())
    if len(tasks) > 1:
        lines.append(totals_line(tasks, now, t0))
    return [line[: max(width - 1, 10)] for line in lines]


def summary(verb: str, tasks: Sequence[Task], now: float, t0: float) -> str:
    """The one line left once all is done: how many boards, how long, how many bytes in what
    transfer time at what rate (bytes over that time: the rate the last frame shows)."""
    failed = sum(1 for t in tasks if t.ok is False)
    ok = len(tasks) - failed
    sent = sum(t.sent for t in tasks)
    what = (
        f"{ok} of {len(tasks)} ok" + (f", {failed} failed" if failed else "")
        if len(tasks) > 1
        else ("failed" if failed else "done")
    )
    first, last = _span(tasks)
    moved = ""
    if sent:
        moved = f"; {size(sent)} sent"
        if first is not None and last is not None and last > first:
            moved += f" in {_seconds(last - first)} at {size(transfer_rate(sent, first, last))}/s"
    return printable(f"{verb}: {what} in {_seconds(now - t0)}{moved}")


def _seconds(took: float) -> str:
    return f"{took:.1f} s" if took < 60 else duration(took)
