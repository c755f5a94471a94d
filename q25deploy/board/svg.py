"""``memory-map.svg``: each DDR bank with the board's existing reservations, the model's
reserved regions and the partitions' used bytes, labelled — the picture to check before
flashing."""

from __future__ import annotations

from xml.sax.saxutils import escape

from ..common import format_size
from .boardfile import Board
from .plan import MemoryPlan

WIDTH = 960
BAR_X = 20
BAR_W = WIDTH - 2 * BAR_X
BANK_H = 150


def _attr(text: str) -> str:
    """Text for an attribute value between double quotes."""
    return escape(text, {'"': "&quot;"})


def memory_svg(board: Board, plan: MemoryPlan) -> str:
    height = 60 + BANK_H * len(board.banks) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{BAR_X}" y="24" font-size="16">{escape(board.name)}: {escape(board.description)}</text>',
        f'<text x="{BAR_X}" y="44">model regions {len(plan.regions)}, {format_size(plan.reserved_bytes)} reserved of '
        f'{format_size(plan.budget)} allowed; {len(plan.tensors)} tensors</text>',
    ]
    for i, bank in enumerate(board.banks):
        y = 60 + i * BANK_H
        def x(addr: int) -> float:
            return BAR_X + (addr - bank.base) * BAR_W / bank.size
        out += [
            f'<g id="bank-{_attr(bank.name)}">',
            f'<text x="{BAR_X}" y="{y + 14}">{escape(bank.name)}: 0x{bank.base:x}-0x{bank.end - 1:x} '
            f'({format_size(bank.size)})</text>',
            f'<rect class="bank" x="{BAR_X}" y="{y + 24}" width="{BAR_W}" height="40" fill="#eef2f5" stroke="#333"/>',
        ]
        for k, r in enumerate(sorted((r for r in board.reserved if r.overlaps(bank)), key=lambda r: r.base)):
            w = max(x(r.end) - x(r.base), 2)
            out += [
                f'<rect class="existing" x="{x(r.base):.1f}" y="{y + 24}" width="{w:.1f}" height="40" '
                f'fill="#b0b0b0" fill-opacity="0.8"><title>{escape(r.name)} 0x{r.base:x} {format_size(r.size)}</title></rect>',
                f'<text x="{x(r.base):.1f}" y="{y + 80 + 14 * k}" fill="#555">{escape(r.name)} @0x{r.base:x} '
                f'({format_size(r.size)})</text>',
            ]
        for r in (r for r in plan.regions if bank.base <= r.base < bank.end):
            w = max(x(r.end) - x(r.base), 2)
            uw = max(x(r.base + r.used) - x(r.base), 1)
            out += [
                f'<rect class="region" x="{x(r.base):.1f}" y="{y + 24}" width="{w:.1f}" height="40" fill="#9cc3ec" '
                f'stroke="#1f5f9f"><title>{r.label} 0x{r.base:x} {format_size(r.size)}</title></rect>',
                f'<rect class="partition" x="{x(r.base):.1f}" y="{y + 34}" width="{uw:.1f}" height="20" '
                f'fill="#1f5f9f"/>',
                f'<text x="{x(r.base):.1f}" y="{y + 128}" fill="#1f5f9f">{r.label} @0x{r.base:x} '
                f'{format_size(r.size)} (partition {r.index}: {format_size(r.used)} used)</text>',
            ]
        out.append("</g>")
    out += [
        f'<text x="{BAR_X}" y="{height - 12}" fill="#555">grey: existing reservations; light blue: q25 reserved '
        f'regions; dark blue: tensor data</text>',
        "</svg>",
        "",
    ]
    return "\n".join(out)
