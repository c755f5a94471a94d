"""Regions are ours by name and place: a region q25deploy writes into physical memory carries
its own node name (``q25-region<N>@<base>``, :data:`q25deploy.schema.NODE_PREFIX`), lies inside
one memory bank of the board file and clear of every ``[[memory.reserved]]`` range (the
firmware's, a remoteproc's, a PL DMA buffer's). The plan only makes such regions; a build
directory, a board's partition map and an OTA payload are input, so the build (the plan),
``deploy`` (before any login) and ``package`` check them against the board file here."""

from __future__ import annotations

from collections.abc import Sequence

from ..schema import NODE_PREFIX, region_node_ours
from .boardfile import Board, Span


def why_not_ours(board: Board, region: dict) -> str | None:
    """None when ``region`` (node, base, size) is ours on ``board``, else why not (a few words)."""
    node, base, size = region.get("node"), region.get("base"), region.get("size")
    if not region_node_ours(node, base) or type(base) is not int:
        return f"not a q25deploy region ({NODE_PREFIX}<N>@<its base in hex>)"
    if type(size) is not int or size <= 0:
        return "no size"
    span = Span(str(node), base, size)
    if not any(b.base <= span.base and span.end <= b.end for b in board.banks):
        return f"not inside one of {board.name}'s memory banks"
    taken = [r.name for r in board.reserved if r.overlaps(span)]
    if taken:
        return f"overlaps {board.name}'s reserved {', '.join(taken)}"
    return None


def foreign(board: Board, regions: Sequence[dict]) -> str | None:
    """One line naming the first region of ``regions`` that is not ours on ``board``, or None."""
    for r in regions:
        why = why_not_ours(board, r)
        if why:
            base, size = r.get("base"), r.get("size")
            where = f" [{base:#x}, {base + size:#x})" if type(base) is int and type(size) is int else ""
            return f"region {str(r.get('node'))[:80]!r}{where} is {why}: refusing to write it"
    return None
