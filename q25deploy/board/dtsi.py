"""``reserved-memory.dtsi``: the device-tree fragment that reserves the model's regions.

A ``/ { reserved-memory { ... } }`` fragment with ``#address-cells = <2>``,
``#size-cells = <2>``, ``ranges``, and one labelled child per region with a static
``reg`` and ``no-map``. The build's layer adds it to meta-xilinx device-tree builds
(``EXTRA_DT_INCLUDE_FILES``); by hand (PetaLinux's ``system-user.dtsi``) only where that does
not apply. An accelerator node points at a region with
``memory-region = <&q25_region0>``.
"""

from __future__ import annotations

from .boardfile import Board
from .plan import MemoryPlan


def cells(value: int) -> str:
    return f"0x{value >> 32:x} 0x{value & 0xFFFFFFFF:x}"


def reserved_memory_dtsi(board: Board, plan: MemoryPlan, notes: str = "") -> str:
    lines = [
        f"// q25deploy reserved memory for {board.name}: {len(plan.regions) + len(plan.spare)} region(s), "
        f"{plan.reserved_bytes:,} bytes",
        "// The build's layer (meta-q25) adds this file to meta-xilinx device-tree builds (its",
        "// device-tree.bbappend); only where that does not apply include it by hand (PetaLinux:",
        "// /include/ from system-user.dtsi). Never both: it would be included twice.",
    ]
    lines += [f"// {n}" for n in notes.splitlines()]
    lines += [
        "/ {",
        "\treserved-memory {",
        "\t\t#address-cells = <2>;",
        "\t\t#size-cells = <2>;",
        "\t\tranges;",
    ]
    for r in plan.regions + plan.spare:
        n_tensors = sum(1 for t in plan.tensors if t.region == r.index)
        what = f"partition {r.index}: {n_tensors} tensors" if r.used else "spare: part of the fixed reservation"
        lines += [
            "",
            f"\t\t/* {what}, {r.used:,} bytes used of {r.size:,} */",
            f"\t\t{r.label}: {r.node_name} {{",
            '\t\t\tcompatible = "shared-dma-pool";',
            f"\t\t\treg = <{cells(r.base)} {cells(r.size)}>;",
            "\t\t\tno-map;",
            "\t\t};",
        ]
    lines += ["\t};", "};", ""]
    return "\n".join(lines)
