"""Geometry for ``memory-map.svg``: text widths from a monospace advance, a broken (widened)
address axis, and label lanes with leader lines that never overlap. Pure functions, no SVG."""

from __future__ import annotations

import bisect
import math
import unicodedata
from dataclasses import dataclass

# Text is drawn in a monospace font; every glyph advances ADVANCE em (DejaVu Sans Mono and
# Liberation Mono: 0.600-0.602 em). Widths are estimated a little wide so a real font never
# reaches past the estimate.
ADVANCE = 0.62
ASCENT = 0.8  # of the font size, above the baseline (box used for overlap checks)
DESCENT = 0.25


def text_width(text: str, size: float) -> float:
    """Estimated advance of ``text`` at font ``size`` (East Asian wide characters count twice)."""
    cells = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return cells * ADVANCE * size


def fit(text: str, size: float, width: float) -> str:
    """``text`` cut with an ellipsis so it fits ``width`` pixels."""
    if text_width(text, size) <= width:
        return text
    while text and text_width(text + "…", size) > width:
        text = text[:-1]
    return text + "…"


def broken_axis(bounds: list[int], x0: float, width: float, min_w: float) -> list[float]:
    """Pixel positions of the sorted addresses ``bounds`` on a strip ``width`` wide: every
    segment gets at least ``min_w`` (less when there are too many), the rest is shared in
    proportion to the square root of each segment's size — small spans stay legible, large
    free windows are compressed, and order is kept."""
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    if not sizes:
        return [x0]
    mw = min(min_w, width * 0.5 / len(sizes))
    weights = [math.sqrt(s) for s in sizes]
    rest = (width - mw * len(sizes)) / (sum(weights) or 1)
    pos = [x0]
    for w in weights:
        pos.append(pos[-1] + mw + w * rest)
    pos[-1] = x0 + width
    return pos


def axis_x(bounds: list[int], pos: list[float], addr: int) -> float:
    """The pixel of ``addr`` on a broken axis (linear inside each segment)."""
    i = min(max(bisect.bisect_right(bounds, addr) - 1, 0), len(bounds) - 2)
    a, b = bounds[i], bounds[i + 1]
    return pos[i] + (pos[i + 1] - pos[i]) * (min(max(addr, a), b) - a) / ((b - a) or 1)


@dataclass(frozen=True)
class Placed:
    """A label in lane ``lane`` (0 nearest the strip), its text box starting at ``box_x``,
    with a vertical leader at ``leader_x`` down to the lane."""

    leader_x: float
    lane: int
    box_x: float
    width: float

    def extent(self, pad: float) -> tuple[float, float]:
        return min(self.box_x, self.leader_x) - pad, max(self.box_x + self.width, self.leader_x) + pad


GAP = 4.0  # leader to text
PAD = 6.0  # between neighbours


def _crossings(c: Placed, placed: list[Placed]) -> int | None:
    """How many leaders would cross a label if ``c`` were placed; None if its box (with its own
    leader) would overlap a label in the same lane — never allowed."""
    lo, hi = c.extent(PAD)
    n = 0
    for p in placed:
        plo, phi = p.extent(PAD)
        if p.lane == c.lane and lo < phi and plo < hi:
            return None
        if p.lane < c.lane and p.box_x - PAD < c.leader_x < p.box_x + p.width + PAD:
            n += 1  # our leader would cross a label nearer the strip
        if p.lane > c.lane and c.box_x - PAD < p.leader_x < c.box_x + c.width + PAD:
            n += 1  # our label would sit on a leader going further down
    return n


def _sides(x: float, w: float, left: float, right: float) -> list[float]:
    """Where a box of width ``w`` may start next to a leader at ``x``: right of it, else left
    of it, else (too wide for either side) clamped into the canvas."""
    out = [b for b in (x + GAP, x - GAP - w) if left <= b and b + w <= right]
    return out or [min(max(x + GAP, left), right - w)]


def place_labels(anchors: list[tuple[float, float]], left: float, right: float) -> list[Placed]:
    """Lanes for labels given as (leader x, text width), inside [left, right]. Greedy, rightmost
    first (a right-facing label's leader then never crosses the labels placed before it);
    each takes the nearest lane where neither its box nor its leader meets another label.
    Returned in the order of ``anchors``; deterministic."""
    order = sorted(range(len(anchors)), key=lambda i: (-anchors[i][0], i))
    placed: list[Placed] = []
    result: dict[int, Placed] = {}
    for i in order:
        x, w = anchors[i]
        w = min(w, right - left)
        lanes = 1 + max((p.lane for p in placed), default=-1)
        best: tuple[int, int, int, Placed] | None = None
        for lane in range(lanes + 1):  # the last is a new, empty lane: a box always fits there
            for k, b in enumerate(_sides(x, w, left, right)):
                c = Placed(x, lane, b, w)
                n = _crossings(c, placed)
                if n is not None and (best is None or (n, lane, k) < best[:3]):
                    best = (n, lane, k, c)
            if best and best[0] == 0:
                break
        assert best is not None
        placed.append(best[3])
        result[i] = best[3]
    return [result[i] for i in range(len(anchors))]
