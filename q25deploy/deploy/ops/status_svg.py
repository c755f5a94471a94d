"""``status --svg FILE``: the build's memory map (``board.svg.memory_svg``) coloured with what
each board reports of its regions (``q25tok verify``, run by ``status``): a region is resident
when it holds this build's partition, differs when it holds other bytes (or another
release's), missing when the running device tree does not reserve it, unknown when the board
could not tell. One file per board: with several boards FILE names each with ``{host}``."""

from __future__ import annotations

import re
from pathlib import Path

from ...board.boardfile import Board
from ...board.plan import MemoryPlan, Placement, Region
from ...common import atomic_file
from ...errors import OutputError, UsageError

HOST_FIELD = "{host}"


def svg_paths(pattern: str, hosts: list[str]) -> dict[str, Path]:
    """host → the file its picture goes to; several hosts need ``{host}`` in ``pattern`` (a
    host becomes letters, digits, ``.``, ``@``, ``-`` and ``_``)."""
    if len(hosts) > 1 and HOST_FIELD not in pattern:
        raise UsageError(f"--svg {pattern}: several boards need {HOST_FIELD} in the file name (one file per board)")
    paths = {h: Path(pattern.replace(HOST_FIELD, re.sub(r"[^A-Za-z0-9.@_-]", "_", h))) for h in hosts}
    if len(set(paths.values())) != len(paths):
        raise UsageError(f"--svg {pattern}: two boards would share a file")
    return paths


def plan_from_map(pmap: dict, board: Board) -> MemoryPlan:
    """The memory plan a build's ``partition_map.json`` records (as the schema checked it:
    anything else is a one-line error, not a KeyError)."""
    try:
        return _plan(pmap, board)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise OutputError(f"the partition map cannot be drawn: {type(e).__name__} {e}") from None


def _plan(pmap: dict, board: Board) -> MemoryPlan:
    regions = tuple(Region(r["index"], r["base"], r["size"], r["used"], r["bank"]) for r in pmap["regions"])
    tensors = tuple(
        Placement(t["name"], t["type"], tuple(t["shape"]), t["bytes"], t["source_offset"], t["region"], t["offset"])
        for t in pmap["tensors"]
    )
    return MemoryPlan(regions, tensors, board.model_budget)


def region_residency(pmap: dict, status: dict) -> dict[int, str]:
    """region index → "resident" / "differs" / "missing" from one board's ``status`` result
    (regions the board did not report are left out: unknown)."""
    reported = {r.get("node"): r for r in status.get("regions") or [] if isinstance(r, dict)}
    out = {}
    for region in pmap.get("regions", []):
        r = reported.get(region.get("node"))
        if r is None:
            continue
        state = r.get("state")
        if state in ("resident", "loaded"):
            out[region["index"]] = "resident" if r.get("sha256", region["sha256"]) == region["sha256"] else "differs"
        elif state == "MISMATCH":
            out[region["index"]] = "differs"
        elif state == "REFUSED":
            out[region["index"]] = "missing"
    return out


def write_svg(path: Path, text: str) -> None:
    """Write ``path`` atomically (a temporary file beside it, then a rename)."""
    try:
        with atomic_file(path) as f:
            f.write(text.encode())
    except OSError as e:
        raise OutputError(f"{path}: cannot write the memory map: {e.strerror or e}") from None


def write_status_svgs(paths: dict[str, Path], results: list[dict], board: Board, pmap: dict) -> None:
    """Each board's picture; its result gains ``svg`` (the file written)."""
    import time

    from ...board.svg import memory_svg

    plan = plan_from_map(pmap, board)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for result in results:
        path = paths[result["host"]]
        release = result.get("current") or ("the image's own" if result.get("image") else "none")
        heading = f"{result['host']} ({board.name}): release {release}, {when}"
        write_svg(path, memory_svg(board, plan, region_residency(pmap, result), heading))
        result["svg"] = str(path)
