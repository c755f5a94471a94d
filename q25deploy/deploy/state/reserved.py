"""Can the board hold the build's regions? Its live ``/reserved-memory``, read in the same round
trip as the board's state (:meth:`.boardfiles.BoardFiles.snapshot`), against the region table.

A region is held when the running device tree has a node of the region's name under
``/reserved-memory`` whose ``reg`` is exactly ``<base size>`` (two address and two size cells)
and that is ``no-map``: the rule ``q25tok load`` applies before it touches ``/dev/mem``
(``reserved_in_dt`` in cli_load.c), so what ``deploy`` accepts the loader accepts. A fixed
reservation (``[layout] reserve``) keeps that rule: the packer writes the reservation's own
regions into the table, so their nodes and ranges are the same for every model that fits.

Parsing is total: whatever a board answers is a verdict or None (a malformed answer).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

from ...schema import region_node_ours

# $4: the device tree ("-": not asked). "tree none|empty|present", then per child of
# /reserved-memory with a reg "node NAME NOMAP" and its reg as od prints it (lines of " xx"
# bytes), then "end" (also when not asked). No subshell: one process per node, forks are dear
# on the A53 (measured on the emulated board, docs/deploying.md)
LISTING = (
    'if [ "$4" = - ]; then :; elif [ ! -d "$4" ]; then echo tree none; '
    'elif [ ! -d "$4/reserved-memory" ]; then echo tree empty; else echo tree present; '
    'for n in "$4"/reserved-memory/*; do [ -f "$n/reg" ] || continue; m=0; [ -e "$n/no-map" ] && m=1; '
    'echo "node ${n##*/} $m"; od -An -v -tx1 "$n/reg"; done; fi; echo end; '
)
_NODE = re.compile(r"[A-Za-z0-9,._+@-]{1,127}")
_OD_LINE = re.compile(r"(?: +[0-9a-f]{2}){1,16} *")
MAX_NODES = 1024
MAX_REG = 256  # bytes of one node's reg: ours are 16
TREES = ("none", "empty", "present")


def split_listing(data: bytes) -> tuple[bytes, bytes] | None:
    """(:data:`LISTING`'s lines without ``end``, what follows) or None when there is no ``end``."""
    head, sep, rest = (b"\n" + data).partition(b"\nend\n")
    return (head[1:], rest) if sep else None


def parse_listing(data: bytes) -> dict | None:
    """``{"tree": none|empty|present, "nodes": {name: {"reg": bytes, "no_map": bool}}}`` from
    :data:`LISTING`'s lines, or None when they are not its answer."""
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError:
        return None
    head = lines[0].split(" ")
    if len(head) != 2 or head[0] != "tree" or head[1] not in TREES:
        return None
    nodes: dict[str, dict] = {}
    name = None
    for line in lines[1:]:
        f = line.split(" ")
        if (
            f[0] == "node"
            and len(f) == 3
            and _NODE.fullmatch(f[1])
            and f[1] not in nodes
            and f[2] in ("0", "1")
            and head[1] == "present"
            and len(nodes) < MAX_NODES
        ):
            name = f[1]
            nodes[name] = {"reg": b"", "no_map": f[2] == "1"}
        elif name is not None and _OD_LINE.fullmatch(line) and len(nodes[name]["reg"]) < MAX_REG:
            nodes[name]["reg"] += bytes.fromhex(line.replace(" ", ""))
        else:
            return None
    return {"tree": head[1], "nodes": nodes}


def why_not_held(region: dict, live: dict) -> str | None:
    """None when ``live`` holds ``region`` (node, exact reg, no-map) and the region is ours by
    name (:func:`~q25deploy.schema.region_node_ours`: another owner's reservation is never
    taken for ours), else why not."""
    if not region_node_ours(region["node"], region["base"]):
        return "not a q25deploy region"
    node = live["nodes"].get(region["node"])
    if node is None:
        return "absent"
    if node["reg"] != struct.pack(">QQ", region["base"], region["size"]):
        return "reserves another range" if node["reg"] else "reg unreadable"
    return None if node["no_map"] else "not no-map"


def unheld(regions: Sequence[dict], live: dict) -> list[tuple[dict, str]]:
    """The regions ``live`` does not hold, each with why."""
    return [(r, why) for r in regions for why in [why_not_held(r, live)] if why]


def refusal(regions: Sequence[dict], live: dict, device_tree: str) -> str | None:
    """One line naming the regions the board cannot hold and the file to put in its image; None
    when it holds them all."""
    missing = unheld(regions, live)
    if not missing:
        return None
    names = ", ".join(f"{r['node']} [{r['base']:#x}, {r['base'] + r['size']:#x}) {why}" for r, why in missing)
    where = {
        "none": f"the board has no {device_tree}, so",
        "empty": f"the board's {device_tree} has no reserved-memory node, so",
        "present": f"the board's {device_tree}/reserved-memory",
    }[live["tree"]]
    return (
        f"{where} does not reserve {len(missing)} of the build's {len(regions)} region(s) ({names}): boot an image "
        "whose device tree includes the build's reserved-memory.dtsi, or pass --allow-unreserved to send "
        "anyway; nothing was sent"
    )
