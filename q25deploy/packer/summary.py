"""The short summary `q25deploy build` ends with: what was written, the memory plan, next steps."""

from __future__ import annotations

import json
from pathlib import Path

from ..common import format_size
from ..layout import DTSI, MANIFEST
from .layer import DEVICE_TREE_DIR
from .request import BuildResult


def render_summary(r: BuildResult) -> str:
    s = r.summary
    lines = []
    if r.note:
        lines.append(f"note: {r.note}")
    state = "up to date" if r.up_to_date else "built"
    lines.append(f"{state}: {s['target']} ({s['board']['description']}) in {r.out}")
    m = s["model"]
    lines.append(f"  model      {m.get('name') or m['reference']}  sha256 {m['sha256'][:16]}…")
    img = s["image"]
    lines.append(
        f"  tokenizer  {img['path']} ({img['size']:,} bytes, fingerprint {img['vocab_fingerprint'][:16]}…) "
        f"-> {img['install_dir']}"
    )
    mem = s["memory"]
    lines.append(
        f"  memory     {len(mem['regions'])} reserved region(s), {format_size(mem['reserved'])} of "
        f"{format_size(mem['budget'])} allowed, {s['tensors']} tensors"
    )
    for reg in mem["regions"]:
        lines.append(
            f"             {reg['label']}  0x{reg['base']:x}-0x{reg['base'] + reg['size'] - 1:x}  "
            f"{format_size(reg['size'])} in {reg['bank']} ({format_size(reg['used'])} used)"
        )
    res = mem.get("reservation")
    if res:
        lines.append(
            f"  reserve    fixed {format_size(res['size'])} in {res['regions']} region(s): the model uses "
            f"{format_size(res['used'])} ({res['used'] / res['size']:.1%}), {len(res['spare'])} region(s) spare"
        )
    if r.payload:
        lines.append(f"  payload    {payload_line(r.payload)}")
    try:
        manifest = json.loads((r.out / MANIFEST).read_text())
        total = sum(a["size"] for a in manifest["artifacts"])
        lines.append(f"  files      {len(manifest['artifacts'])} files, {total:,} bytes (listed in {MANIFEST})")
    except (OSError, ValueError, KeyError):
        pass
    lines += [
        "next steps:",
        f"  1. check {r.out / 'memory-map.svg'}",
        f"  2. {device_tree_step(r.out)}",
        f"  3. put {r.out / 'q25_memory_map.h'} where the A53 program and HLS testbenches include it",
        f'  4. add the layer {r.out / "meta-q25"} to PetaLinux/Yocto and IMAGE_INSTALL:append = " packagegroup-q25" '
        "(see its README)",
    ]
    return "\n".join(lines)


def payload_line(rep: dict) -> str:
    """How the partitions were made: shared with the GGUF, copied or linked, and where the
    digests came from."""
    how = []
    if rep["linked"]:
        how.append(f"{format_size(rep['linked'])} hard-linked from the last build")
    if rep["shared"]:
        how.append(f"{format_size(rep['shared'])} sharing the GGUF's blocks (reflink)")
    if rep["copied"] or not how:
        how.append(f"{format_size(rep['copied'])} copied")
    d = rep["digests"]
    if d["tensors"] == d["partitions"]:
        digests = f"digests {d['tensors'] if d['tensors'] != 'cache' else 'from the cache'}"
    else:
        digests = f"tensor digests {d['tensors']}, partition digests {d['partitions']}"
    read = f", {format_size(rep['hashed'])} read once to hash" if rep["hashed"] else ""
    return f"{', '.join(how)}; {digests.replace('last build', 'from the last build')}{read}"


def device_tree_step(out) -> str:
    """The device-tree step, as the layer has it: where the layer's ``device-tree.bbappend``
    adds the fragment (a meta-xilinx device-tree build), nothing by hand, and the hand route
    only where that bbappend does not apply; never both (the fragment would be included twice)."""
    bbappend = Path(out) / "meta-q25" / DEVICE_TREE_DIR / "device-tree.bbappend"
    if bbappend.is_file():
        return (
            f"device tree: the layer's {DEVICE_TREE_DIR}/device-tree.bbappend adds {DTSI} for meta-xilinx "
            "device-tree builds (PetaLinux, Yocto with meta-xilinx-core): nothing to include by hand. "
            f"Only where that bbappend does not apply (no meta-xilinx, a custom device-tree flow) /include/ "
            f"{Path(out) / DTSI} from your own device tree (e.g. system-user.dtsi) instead, never both: "
            "it would be included twice"
        )
    return (
        f"device tree: the layer changes none for this board (see the notes in {Path(out) / DTSI}); "
        "where your image's device tree needs the regions, include that file by hand "
        "(PetaLinux: /include/ it from system-user.dtsi)"
    )
