"""``memory-map.svg``: each DDR bank with the board's existing reservations, the model's
reserved regions and the partitions' used bytes, labelled — the picture to check before
flashing (and, with ``residency``, what a board holds).

Each bank is drawn twice: a thin bar to scale (how much of the bank is taken, and where),
and below it, joined by a fan, a strip on a broken axis where every span is widened to at
least a few dozen pixels and free windows are compressed (so an 8 MiB region in a 2 GiB bank
is a block, not a 1-pixel sliver). Sizes and addresses are in the labels, which sit in lanes
under the strip with leader lines (layout in :mod:`.svglayout`). Output is a pure function of
its arguments: same plan, same bytes."""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

from ..common import format_size
from .boardfile import Board, Span
from .plan import MemoryPlan
from .svglayout import ASCENT, axis_x, broken_axis, fit, place_labels, text_width

WIDTH = 960
BAR_X = 16
BAR_W = WIDTH - 2 * BAR_X
FONT = 11  # labels
LANE_H = 16
MIN_SPAN = 36  # px a span gets at least on the broken axis

EXISTING = ("#5f5f5f", "#c4c4c4")  # (stroke/text, fill)
REGION = ("#1f5f9f", "#a9cdf0")
RESIDENCY = {
    "resident": ("#2e7d32", "#a5d6a7"),
    "missing": ("#a15c00", "#ffd699"),
    "differs": ("#c62828", "#f4a3a3"),
}
UNKNOWN = ("#616161", "#e6e6e6")
HALO = ' stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"'


def _attr(text: str) -> str:
    """Text for an attribute value between double quotes."""
    return escape(text, {'"': "&quot;"})


def _text(x: float, y: float, s: str, size: float = FONT, fill: str = "#222222", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"{extra}>{escape(s)}</text>'


def _rect(cls: str, x: float, y: float, w: float, h: float, fill: str, extra: str = "", title: str = "") -> str:
    t = f"<title>{escape(title)}</title></rect>" if title else "/>"
    return f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"{extra}' + (
        ">" + t if title else t
    )


@dataclass(frozen=True)
class _Item:
    """A span drawn in a bank: an existing reservation or one of our regions."""

    kind: str  # "existing" | "region"
    span: Span  # clipped to the bank
    label: str
    colours: tuple[str, str]
    used: int = 0
    depth: int = 0  # how many larger reservations it overlaps (drawn inset)


def _status(index: int, residency: dict[int, str] | None) -> tuple[str, tuple[str, str]]:
    if residency is None:
        return "", REGION
    s = residency.get(index, "unknown")
    return s, RESIDENCY.get(s, UNKNOWN)


def _items(board: Board, plan: MemoryPlan, bank: Span, residency: dict[int, str] | None) -> list[_Item]:
    out: list[_Item] = []
    existing = sorted((r for r in board.reserved if r.overlaps(bank)), key=lambda r: (-r.size, r.base, r.name))
    for k, r in enumerate(existing):
        lo, hi = max(r.base, bank.base), min(r.end, bank.end)
        depth = sum(1 for o in existing[:k] if o.overlaps(r))
        out.append(
            _Item(
                "existing",
                Span(r.name, lo, hi - lo),
                f"{r.name} @0x{r.base:x} {format_size(r.size)}",
                EXISTING,
                depth=depth,
            )
        )
    for reg in sorted((g for g in plan.regions if bank.base <= g.base < bank.end), key=lambda g: g.base):
        status, colours = _status(reg.index, residency)
        text = f"{reg.label} @0x{reg.base:x} {format_size(reg.size)}, {format_size(reg.used)} used"
        out.append(
            _Item(
                "region",
                Span(reg.label, reg.base, min(reg.end, bank.end) - reg.base),
                text + (f", {status}" if status else ""),
                colours,
                used=reg.used,
            )
        )
    return out


def _overview(bank: Span, items: list[_Item], y: float) -> tuple[list[str], list[tuple[float, float]]]:
    """The bar to scale with address ticks above it; returns its SVG and each item's x range."""

    def ox(a: int) -> float:
        return BAR_X + (a - bank.base) * BAR_W / bank.size

    out = [
        f'<rect class="bank-scale" x="{BAR_X}" y="{y + 14}" width="{BAR_W}" height="14" fill="#f4f6f8" stroke="#445"/>'
    ]
    for i in range(5):
        addr = bank.base + bank.size * i // 4
        s = f"0x{addr:x}"
        w = text_width(s, 10)
        x = min(max(ox(addr) - w / 2, BAR_X), BAR_X + BAR_W - w)
        out += [
            f'<line x1="{ox(addr):.1f}" y1="{y + 10}" x2="{ox(addr):.1f}" y2="{y + 14}" stroke="#445"/>',
            _text(x, y + 8, s, 10, "#445"),
        ]
    ranges = []
    for it in items:
        x, w = ox(it.span.base), max(ox(it.span.end) - ox(it.span.base), 1.5)
        x = min(x, BAR_X + BAR_W - w)
        ranges.append((x, x + w))
        out.append(
            _rect(
                f"{it.kind}-scale",
                x,
                y + 14 + 2 * it.depth,
                w,
                14 - 4 * it.depth,
                it.colours[1 if it.kind == "existing" else 0],
            )
        )
    return out, ranges


def _axis(bank: Span, items: list[_Item]) -> tuple[list[int], list[float]]:
    """The broken axis of a bank: every span's ends, and their pixels."""
    bounds = sorted({bank.base, bank.end} | {a for it in items for a in (it.span.base, it.span.end)})
    return bounds, broken_axis(bounds, BAR_X, BAR_W, MIN_SPAN)


def _strip(bank: Span, items: list[_Item], y: float) -> tuple[list[str], list[float]]:
    """The broken-axis strip (40 px high at ``y``); returns its SVG and the items' leader x."""
    bounds, pos = _axis(bank, items)
    out = [f'<rect class="bank" x="{BAR_X}" y="{y}" width="{BAR_W}" height="40" fill="#f4f6f8" stroke="#445"/>']
    for a, b, xa, xb in zip(bounds, bounds[1:], pos, pos[1:]):
        if any(it.span.base <= a and b <= it.span.end for it in items):
            continue
        s = f"free {format_size(b - a)}"
        if text_width(s, 10) + 6 <= xb - xa:
            out.append(_text((xa + xb - text_width(s, 10)) / 2, y + 24, s, 10, "#777777"))
    leaders = []
    for it in items:
        xa, xb = axis_x(bounds, pos, it.span.base), axis_x(bounds, pos, it.span.end)
        inset = 4 * it.depth
        stroke, fill = it.colours
        title = it.label
        if it.kind == "existing":
            out.append(_rect("existing", xa, y + inset, xb - xa, 40 - 2 * inset, fill, f' stroke="{stroke}"', title))
        else:
            used = (xb - xa) * min(it.used / (it.span.size or 1), 1)
            out += [
                _rect("region", xa, y, xb - xa, 40, fill, f' stroke="{stroke}"', title),
                _rect("partition", xa, y + 12, max(used, 1), 16, stroke),
            ]
            num = it.span.name.removeprefix("q25_region")  # the region's number, where it fits
            if text_width(num, 9) + 4 <= xb - xa:
                out.append(_text((xa + xb - text_width(num, 9)) / 2, y + 10, num, 9, stroke))
        leaders.append(min(xa + (xb - xa) / 2 + 6 * it.depth, xb - 2))
    return out, leaders


def _labels(items: list[_Item], leaders: list[float], y: float) -> tuple[list[str], float]:
    """Labels in lanes under the strip (bottom at ``y``), leader lines up to their spans; returns
    the SVG and the height used."""
    widths = [text_width(it.label, FONT) for it in items]
    placed = place_labels(list(zip(leaders, widths)), BAR_X, BAR_X + BAR_W)
    lines, texts = [], []
    for it, p in zip(items, placed):
        base = y + 8 + p.lane * LANE_H + FONT * ASCENT
        stroke = it.colours[0]
        lines += [
            f'<line class="leader" x1="{p.leader_x:.1f}" y1="{y - 4 * it.depth:.1f}" x2="{p.leader_x:.1f}" '
            f'y2="{base - FONT * 0.35:.1f}" stroke="{stroke}" stroke-width="1" stroke-opacity="0.8"/>',
            f'<circle cx="{p.leader_x:.1f}" cy="{base - FONT * 0.35:.1f}" r="1.5" fill="{stroke}"/>',
        ]
        texts.append(_text(p.box_x, base, fit(it.label, FONT, p.width), FONT, stroke, HALO))
    out = lines + texts  # text last: its halo covers any leader passing under it
    lanes = 1 + max((p.lane for p in placed), default=-1)
    return out, 8 + lanes * LANE_H + 4


def _bank(
    board: Board, plan: MemoryPlan, bank: Span, y: float, residency: dict[int, str] | None
) -> tuple[list[str], float]:
    items = _items(board, plan, bank, residency)
    ours = [it.span.size for it in items if it.kind == "region"]
    head = fit(f"{bank.name}: 0x{bank.base:x}-0x{bank.end - 1:x} ({format_size(bank.size)})", 13, BAR_W)
    sub = f"q25: {len(ours)} region(s), {format_size(sum(ours))}" if ours else "q25: no regions"
    out = [f'<g id="bank-{_attr(bank.name)}">', _text(BAR_X, y + 13, head, 13, "#111111", ' font-weight="bold"')]
    x = BAR_X + text_width(head, 13) + 12
    if x + text_width(sub, FONT) <= BAR_X + BAR_W:
        out.append(_text(x, y + 13, sub, FONT, "#333333"))
    scale, ranges = _overview(bank, items, y + 20)
    strip, leaders = _strip(bank, items, y + 86)
    bounds, pos = _axis(bank, items)
    fan = []
    for it, (a, b) in zip(items, ranges):  # the fan joins each span to scale with its widened self
        c, d = axis_x(bounds, pos, it.span.base), axis_x(bounds, pos, it.span.end)
        fan.append(
            f'<polygon points="{a:.1f},{y + 48} {b:.1f},{y + 48} {d:.1f},{y + 86} {c:.1f},{y + 86}" '
            f'fill="{it.colours[1]}" fill-opacity="0.45" stroke="{it.colours[0]}" stroke-opacity="0.25"/>'
        )
    labels, h = _labels(items, leaders, y + 126)
    return out + scale + fan + strip + labels + ["</g>"], 126 + h + 10


def _legend(y: float, plan: MemoryPlan, residency: dict[int, str] | None) -> tuple[list[str], float]:
    keys = [
        ("existing reservation (board)", EXISTING[1]),
        ("q25 region (reserved)", REGION[1]),
        ("partition data (used bytes)", REGION[0]),
    ]
    if residency is not None:
        keys = keys[:1] + [(f"region {k}", c[1]) for k, c in RESIDENCY.items()]
        if any(residency.get(r.index) not in RESIDENCY for r in plan.regions):
            keys.append(("region not read back / unknown", UNKNOWN[1]))
        keys.append(("partition data: darker bar", RESIDENCY["resident"][0]))
    out, x, row = [], float(BAR_X), 0
    for name, colour in keys:
        w = 16 + text_width(name, FONT)
        if x + w > BAR_X + BAR_W:
            x, row = float(BAR_X), row + 1
        yy = y + row * LANE_H
        out += [
            f'<rect x="{x:.1f}" y="{yy:.1f}" width="12" height="12" fill="{colour}" stroke="#445"/>',
            _text(x + 16, yy + 10, name, FONT, "#333333"),
        ]
        x += w + 18
    note = (
        "Each bank: top bar to scale, ticks at quarters; strip below widens small spans and "
        "compresses free space (not to scale) — exact addresses and sizes are in the labels."
    )
    yy = y + (row + 1) * LANE_H + 6
    lines = []
    while note:  # wrap at word boundaries to the canvas width
        cut = len(note) if text_width(note, 10) <= BAR_W else note.rfind(" ", 0, int(BAR_W / (10 * 0.62)))
        lines.append(note[:cut])
        note = note[cut:].lstrip()
    out += [_text(BAR_X, yy + 10 + 14 * i, s, 10, "#555555") for i, s in enumerate(lines)]
    return out, (row + 1) * LANE_H + 6 + 14 * len(lines) + 4


def memory_svg(
    board: Board, plan: MemoryPlan, residency: dict[int, str] | None = None, heading: str | None = None
) -> str:
    """The picture of ``plan`` on ``board``; ``residency`` (region index → "resident", "missing"
    or "differs", as a board reports it) colours the regions instead of the plain plan colours;
    ``heading`` replaces the title (a board's status: its host, release and time)."""
    title = fit(heading or (f"{board.name}: {board.description}" if board.description else board.name), 15, BAR_W)
    summary = fit(
        f"{len(plan.regions)} model region(s): {format_size(plan.reserved_bytes)} reserved of "
        f"{format_size(plan.budget)} allowed ({format_size(board.ddr_bytes)} DDR); "
        f"{len(plan.tensors)} tensors",
        FONT,
        BAR_W,
    )
    body = [_text(BAR_X, 24, title, 15, "#111111", ' font-weight="bold"'), _text(BAR_X, 42, summary, FONT, "#333333")]
    y = 56.0
    for bank in board.banks:
        part, h = _bank(board, plan, bank, y, residency)
        body += part
        y += h
    legend, h = _legend(y, plan, residency)
    height = int(y + h + 8)
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'font-family="DejaVu Sans Mono, Liberation Mono, monospace" font-size="{FONT}">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    return "\n".join(head + body + legend + ["</svg>", ""])
