"""``q25_memory_map.h``: region bases/sizes and every tensor's physical address, for the
A53 program and HLS testbenches."""

from __future__ import annotations

import re

from gguf import GGMLQuantizationType

from ..errors import GGUFError
from .boardfile import Board
from .plan import MemoryPlan


def c_identifier(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def memory_header(board: Board, plan: MemoryPlan) -> str:
    out = [
        f"/* q25_memory_map.h: the q25deploy memory plan for {board.name}. Generated; do not edit. */",
        "#ifndef Q25_MEMORY_MAP_H",
        "#define Q25_MEMORY_MAP_H",
        "",
        "#include <stdint.h>",
        "",
        f'#define Q25_BOARD "{board.name}"',
        f"#define Q25_REGION_COUNT {len(plan.regions)}u",
        f"#define Q25_TENSOR_COUNT {len(plan.tensors)}u",
        "",
    ]
    for r in plan.regions:
        out += [
            f"#define Q25_REGION{r.index}_BASE 0x{r.base:x}ull",
            f"#define Q25_REGION{r.index}_SIZE 0x{r.size:x}ull",
            f"#define Q25_REGION{r.index}_USED 0x{r.used:x}ull",
        ]
    out.append("")
    seen: dict[str, str] = {}
    for t in plan.tensors:
        ident = "Q25_T_" + c_identifier(t.name)
        if ident in seen:
            raise GGUFError(f"tensor names {seen[ident]!r} and {t.name!r} give the same C identifier {ident}")
        seen[ident] = t.name
        out += [
            f"#define {ident}_ADDR 0x{plan.address(t):x}ull",
            f"#define {ident}_BYTES {t.nbytes}ull",
        ]
    out += [
        "",
        "typedef struct q25_tensor_addr {",
        "    const char *name;",
        "    uint64_t addr;  /* physical address */",
        "    uint64_t bytes;",
        "    uint32_t region;",
        "    uint32_t ggml_type;  /* enum ggml_type */",
        "    uint64_t shape[4];  /* ne0 (row length) first, 1 where unused */",
        "} q25_tensor_addr;",
        "",
        "#if defined(__GNUC__)",
        "#define Q25_MEMORY_MAP_UNUSED __attribute__((unused))",
        "#else",
        "#define Q25_MEMORY_MAP_UNUSED",
        "#endif",
        "",
        "static const q25_tensor_addr q25_tensors[Q25_TENSOR_COUNT] Q25_MEMORY_MAP_UNUSED = {",
    ]
    for t in plan.tensors:
        shape = list(t.shape) + [1] * (4 - len(t.shape))
        qtype = GGMLQuantizationType[t.type_name].value
        out.append(
            f'    {{"{t.name}", 0x{plan.address(t):x}ull, {t.nbytes}ull, {t.region}u, {qtype}u, '
            f"{{{', '.join(f'{d}ull' for d in shape)}}}}},"
        )
    out += ["};", "", "#endif /* Q25_MEMORY_MAP_H */", ""]
    return "\n".join(out)
