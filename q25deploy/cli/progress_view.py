"""What the progress display shows, as a pure function of its state: one line per board (or
per task: a build, a package) with its phase, bytes sent of the total, rate and time left; at
more boards than fit, the active ones and a totals line; and the summary once all is done.

No I/O here (:mod:`.progress` writes the lines to the terminal); every name and phase is
escaped (a hosts file, a board's answer may carry escape sequences)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..common import printable

PHASE = 26  # the phase column's width


@dataclass
class Task:
    """One board's (or one task's) progress."""

    name: str
    phase: str = "waiting"
    sent: int = 0
    total: int = 0  # bytes planned (0: not known, or nothing to send)
    started: float | None = None  # first byte
    last: float | None = None  # latest byte
    began: float | None = None  # first phase
    ended: float | None = None
    ok: bool | None = None


def size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover (the loop returns)


def duration(seconds: float) -> str:
    s = max(0, int(seconds + 0.5))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _rate(sent: int, since: float | None, now: float) -> float:
    return sent / max(now - since, 1e-3) if since is not None and sent else 0.0


def _bytes_fields(sent: int, total: int, rate: float) -> str:
    if not total and not sent:
        return ""
    if not total:
        return f"{size(sent)}{f'  {size(rate)}/s' if rate else ''}"
    pct = min(100, sent * 100 // total)
    left = f"  {duration((total - sent) / rate)} left" if rate and sent < total else ""
    return f"{size(sent)} of {size(total)} {pct:3d}%{f'  {size(rate)}/s' if rate else ''}{left}"


def task_line(t: Task, now: float, name_width: int) -> str:
    """``NAME  PHASE  SENT of TOTAL  PCT%  RATE  TIME left`` (or the elapsed time without bytes)."""
    end = t.ended if t.ended is not None else now
    phase = t.phase if t.ok is None else ("done" if t.ok else f"FAILED: {t.phase}")
    sending = t.ended is None and t.sent < t.total  # else the rate is the transfer's own, to its last byte
    fields = _bytes_fields(t.sent, t.total, _rate(t.sent, t.started, now if sending else (t.last or end)))
    if not fields and t.began is not None:
        fields = duration(end - t.began)
    return printable(f"{t.name:<{name_width}}  {phase[:PHASE]:<{PHASE}}  {fields}").rstrip()


def totals_line(tasks: Sequence[Task], now: float, t0: float) -> str:
    done = [t for t in tasks if t.ended is not None]
    failed = sum(1 for t in done if t.ok is False)
    active = sum(1 for t in tasks if t.ended is None and t.began is not None)
    sent, total = sum(t.sent for t in tasks), sum(t.total for t in tasks)
    rate = _rate(sent, t0, now)
    head = f"{len(done)} of {len(tasks)} done" + (f" ({failed} failed)" if failed else "")
    head += f", {active} active" if active else ""
    fields = _bytes_fields(sent, total, rate)
    return f"{head}{'  ' + fields if fields else ''}  {duration(now - t0)}"


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
    lines = [task_line(t, now, name_width) for t in shown]
    if len(tasks) > 1:
        lines.append(totals_line(tasks, now, t0))
    return [line[: max(width - 1, 10)] for line in lines]


def summary(verb: str, tasks: Sequence[Task], now: float, t0: float) -> str:
    """The one line left once all is done: how many boards, how long, how many bytes at what rate."""
    failed = sum(1 for t in tasks if t.ok is False)
    ok = len(tasks) - failed
    sent = sum(t.sent for t in tasks)
    what = (
        f"{ok} of {len(tasks)} ok" + (f", {failed} failed" if failed else "")
        if len(tasks) > 1
        else ("failed" if failed else "done")
    )
    moved = f"; {size(sent)} sent at {size(_rate(sent, t0, now))}/s" if sent else ""
    took = now - t0
    return printable(f"{verb}: {what} in {f'{took:.1f} s' if took < 60 else duration(took)}{moved}")
