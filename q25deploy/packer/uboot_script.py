"""``uboot/q25-regions.cmd``: a U-Boot script that loads every partition into its reserved region
before Linux starts (for weights in DDR before ``booti``), generated from the partition map.

Compile it with ``mkimage -A arm64 -T script -C none -d q25-regions.cmd q25-regions.scr`` and
``source`` it from ``boot.scr`` before ``booti``. It reads the partitions of the board's
``current`` release from its root filesystem (``q25_dev``, e.g. ``mmc 0:2``; ``q25_dir``,
default ``<install dir>/current/partitions``), checks each file's size, zeroes the rest of the
region (as ``q25tok load`` leaves it) and sets ``q25_ok`` to 0 when a region failed. A U-Boot
that refuses to load into memory it reserves (``** Reading file would overwrite reserved
memory **``) can load through ``q25_scratch``, a free DDR address: load there, then ``cp.b``.

Everything that lands in the script is checked here: file and node names, the install
directory; numbers are written by this module."""

from __future__ import annotations

import posixpath
import re

from ..errors import Q25Error

KIND = "u-boot-script"
_FILE = re.compile(r"[A-Za-z0-9._-]+\Z")
_NODE = re.compile(r"[A-Za-z0-9,._+-]+@[0-9a-f]+\Z")
_DIR = re.compile(r"/[A-Za-z0-9._/+-]*\Z")


def _checked(pattern: re.Pattern, value: str, what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value) or ".." in value.split("/"):
        raise Q25Error(f"refusing to write {value!r} into the U-Boot script: not a plain {what}")
    return value


def _region_lines(r: dict) -> list[str]:
    node = _checked(_NODE, r["node"], "device-tree node name")
    name = _checked(_FILE, posixpath.basename(r["file"]), "file name")
    base, size, used = int(r["base"]), int(r["size"]), int(r["used"])
    if not 0 < used <= size:
        raise Q25Error(f"region {node}: {used} bytes do not fit its {size}")
    tail = [f"    mw.b {base + used:#x} 0 {size - used:#x}"] if used < size else []
    return [
        f"# {node}: {name}, {used} bytes of {size:#x} at {base:#x}, sha256 {r['sha256']}",
        f'if test -n "${{q25_scratch}}"; then setenv q25_at ${{q25_scratch}}; else setenv q25_at {base:#x}; fi',
        f'if load ${{q25_dev}} ${{q25_at}} ${{q25_dir}}/{name} && test "${{filesize}}" = "{used:x}"; then',
        f'    if test -n "${{q25_scratch}}"; then cp.b ${{q25_scratch}} {base:#x} {used:#x}; fi',
        *tail,
        f'    echo "q25: region {node} loaded"',
        "else",
        "    setenv q25_ok 0",
        f'    echo "q25: region {node} FAILED ({name}: not loaded, or not {used} bytes)"',
        "fi",
    ]


def uboot_script(partition_map: dict, install_dir: str) -> str:
    """The script's text for a build's partition map (regions in the map's order)."""
    default_dir = _checked(_DIR, posixpath.join(install_dir, "current", "partitions"), "absolute directory")
    regions = partition_map["regions"]
    lines = [
        "# q25deploy: load the model's partitions into their reserved DDR regions before Linux starts",
        f"# target {_checked(_FILE, partition_map['target'], 'target name')}, {len(regions)} region(s), "
        f"model sha256 {partition_map['model']['sha256']}",
        "# mkimage -A arm64 -T script -C none -d q25-regions.cmd q25-regions.scr; then in boot.scr, before booti:",
        "#   setenv q25_dev mmc 0:2; load mmc 0:1 ${scriptaddr} q25-regions.scr; source ${scriptaddr}",
        "# q25_dev: interface and partition of the root filesystem (required); q25_dir: where the",
        f"# partitions are (default {default_dir}); q25_scratch: a free DDR address to load through",
        "# when U-Boot refuses to load into reserved memory. q25_ok is 0 afterwards if a region failed.",
        'if test -z "${q25_dev}"; then echo "q25: set q25_dev (e.g. mmc 0:2): no region loaded"; exit; fi',
        f'if test -z "${{q25_dir}}"; then setenv q25_dir {default_dir}; fi',
        "setenv q25_ok 1",
        f'echo "q25: loading {len(regions)} region(s) from ${{q25_dev}} ${{q25_dir}}"',
    ]
    for r in regions:
        lines += _region_lines(r)
    lines.append("setenv q25_at")
    return "\n".join(lines) + "\n"
