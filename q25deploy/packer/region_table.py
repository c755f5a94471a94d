"""The region table: the partition map in a form trivial for C to parse on the board.

``partitions/regions.tab`` (kind ``region-table``) has one line per reserved region:

    NODE BASE SIZE FILE FILE_SIZE SHA256

``NODE`` is the device-tree node under ``/reserved-memory``, ``BASE`` and ``SIZE`` are hex,
``FILE`` is relative to the table's directory, ``FILE_SIZE`` decimal, ``SHA256`` the
partition's digest; ``#`` starts a comment. ``q25tok load`` / ``q25tok verify`` read it
(``q25_region_table_parse`` in the C runtime)."""

from __future__ import annotations

import posixpath

from ..layout import REGION_TABLE as TABLE

KIND = "region-table"


def region_table(partition_map: dict) -> str:
    lines = [
        "# q25deploy region table 1: node base size file file_size sha256",
        f"# target {partition_map['target']}, model sha256 {partition_map['model']['sha256']}",
    ]
    for r in partition_map["regions"]:
        rel = posixpath.relpath(r["file"], posixpath.dirname(TABLE))
        lines.append(f"{r['node']} {r['base']:#x} {r['size']:#x} {rel} {r['used']} {r['sha256']}")
    return "\n".join(lines) + "\n"
