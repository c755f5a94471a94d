"""``q25deploy export fixtures``: golden values for testbenches of an accelerator's kernels.

For each quant type in the model, the first and last tensor of that type (or the tensors asked
for), a few rows: their raw ggml blocks as the GGUF holds them, the float32 values gguf-py's
dequantization gives (``q25_dequantize`` in the C runtime gives the same bits), an input vector
``x`` and each row's product with it, in float32 summed in index order and in float64 (the exact
sum rounded once). Little-endian binary files, ``fixtures.json`` (shapes, types, offsets,
tolerances) and ``q25_fixtures.h``, which holds the same data as C arrays. See docs/fixtures.md.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from ..errors import UsageError
from ..model.gguf import GGUFFile
from ..model.source import ModelSource, file_sha256
from .outputs import OutputDir

FORMAT = "q25deploy-fixtures/1"
INDEX = "fixtures.json"
HEADER = "q25_fixtures.h"
FILES = {"blocks": "blocks.bin", "values": "values.f32", "x": "x.f32", "dot_f32": "dot.f32", "dot_f64": "dot.f64"}
SCAN_ROWS = 64  # rows looked at for finite ones (a random-byte test model has NaN scales)
U32 = 2.0**-24  # unit roundoff of float32
# the types q25_dequantize knows (and gguf-py dequantizes)
TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def choose(f: GGUFFile, names: list[str]) -> list:
    """The tensors asked for, or the first and last tensor of each quant type, in file order."""
    by_name = {t.name: t for t in f.tensors}
    if names:
        for n in names:
            if n not in by_name:
                raise UsageError(f"no tensor {n!r:.80} in the model (see q25deploy inspect)")
            if by_name[n].type_name not in TYPES:
                raise UsageError(
                    f"tensor {n}: ggml type {by_name[n].type_name} is not one q25_dequantize knows ({', '.join(TYPES)})"
                )
        return [by_name[n] for n in dict.fromkeys(names)]
    picked: dict[str, list] = {}
    for t in (t for t in f.tensors if t.type_name in TYPES):
        ends = picked.setdefault(t.type_name, [t, t])
        ends[1] = t
    return [t for ends in picked.values() for t in dict.fromkeys(ends)]


def _x(name: str, n: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(f"q25deploy fixtures x: {name}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(n, dtype=np.float32)


def _fixture(t, model, rows: int) -> tuple[dict, dict[str, bytes]]:
    qtype = GGMLQuantizationType(t.ggml_type)
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    ne0 = t.shape[0]
    row_bytes = ne0 // block_elems * block_bytes
    scan = min(t.n_elements // ne0, SCAN_ROWS)
    model.seek(t.data_offset)
    raw = model.read(scan * row_bytes)
    with np.errstate(all="ignore"):
        values = np.asarray(dequantize(np.frombuffer(raw[: scan * row_bytes], np.uint8), qtype), np.float32)
        values = values.reshape(scan, ne0)
        finite = [r for r in range(scan) if np.isfinite(values[r]).all()]
        chosen = (finite + [r for r in range(scan) if r not in finite])[:rows]
        x = _x(t.name, ne0)
        w = values[chosen]
        products = w * x  # float32, rounded once each
        dot32 = np.add.accumulate(
            np.concatenate([np.zeros((len(chosen), 1), np.float32), products], 1), axis=1, dtype=np.float32
        )[:, -1]
    dot64, bound = [], []
    for r in range(len(chosen)):
        exact = [float(a) * float(b) for a, b in zip(w[r], x)]  # float32 x float32 is exact in float64
        ok = all(map(math.isfinite, exact))
        dot64.append(math.fsum(exact) if ok else float("nan"))
        gamma = ne0 * U32 / (1 - ne0 * U32)
        bound.append(gamma * math.fsum(map(abs, exact)) if ok else None)
    blocks = b"".join(raw[r * row_bytes : (r + 1) * row_bytes] for r in chosen)
    data = {
        "blocks": blocks,
        "values": w.astype("<f4").tobytes(),
        "x": x.astype("<f4").tobytes(),
        "dot_f32": dot32.astype("<f4").tobytes(),
        "dot_f64": np.array(dot64, "<f8").tobytes(),
    }
    entry = {
        "name": t.name,
        "type": t.type_name,
        "type_id": t.ggml_type,
        "shape": list(t.shape),
        "block_elems": block_elems,
        "block_bytes": block_bytes,
        "row_bytes": row_bytes,
        "rows": chosen,
        "source_offset": t.data_offset,
        "row_source_offsets": [t.data_offset + r * row_bytes for r in chosen],
        "nonfinite_values": int((~np.isfinite(w)).sum()),
        "tolerance": {"values": 0, "dot_f32_index_order": 0, "dot_f32_any_order": bound},
    }
    return entry, data


def _c_array(ctype: str, name: str, items: list[str]) -> str:
    body = ",\n".join(", ".join(items[i : i + 12]) for i in range(0, len(items), 12))
    return f"static const {ctype} {name}[{max(len(items), 1)}] = {{\n{body or '0'}\n}};\n"


C_STRUCT = """typedef struct q25fx_tensor {
    const char *name;
    uint32_t type, ne0, rows;
    uint32_t blocks; /* byte offset in q25fx_blocks */
    uint32_t values, x, dot; /* element offsets in q25fx_values, q25fx_x, q25fx_dot_f32/f64 */
} q25fx_tensor;

"""


def _words(data: bytes, fmt: str) -> list[str]:
    """Little-endian words as C hex literals (float bits: NaN payloads and -0 survive)."""
    return [f"0x{v:0{8 if fmt == '<u4' else 16}x}{'u' if fmt == '<u4' else 'ull'}" for v in np.frombuffer(data, fmt)]


def c_header(index: dict, files: dict[str, bytes]) -> str:
    """The fixtures as C: a table of the tensors (offsets in elements of each array) and the data
    (floats as their bits, so NaN and -0 survive, and x as exact hex floats)."""
    rows = []
    for e in index["fixtures"]:
        o = e["offsets"]
        rows.append(
            f'    {{"{e["name"]}", {e["type_id"]}u, {e["shape"][0]}u, {len(e["rows"])}u, {o["blocks"]}u, '
            f"{o['values'] // 4}u, {o['x'] // 4}u, {o['dot_f32'] // 4}u}},"
        )
    preamble = (
        f"/* Golden fixtures of model sha256 {index['model']['sha256']}\n"
        f" * (q25deploy export fixtures; {FORMAT}). Generated: do not edit. See docs/fixtures.md. */\n"
    )
    most = max((len(e["rows"]) * e["shape"][0] for e in index["fixtures"]), default=1)
    return "".join(
        [
            preamble,
            "#ifndef Q25_FIXTURES_H\n#define Q25_FIXTURES_H\n#include <stdint.h>\n\n",
            f"#define Q25FX_COUNT {len(rows)}\n#define Q25FX_MAX_VALUES {most}\n\n",
            C_STRUCT,
            f"static const q25fx_tensor q25fx_tensors[{max(len(rows), 1)}] = {{\n" + "\n".join(rows) + "\n};\n",
            _c_array("uint8_t", "q25fx_blocks", [f"0x{b:02x}" for b in files["blocks"]]),
            _c_array("uint32_t", "q25fx_values", _words(files["values"], "<u4")),
            _c_array("float", "q25fx_x", [float(v).hex() + "f" for v in np.frombuffer(files["x"], "<f4")]),
            _c_array("uint32_t", "q25fx_dot_f32", _words(files["dot_f32"], "<u4")),
            _c_array("uint64_t", "q25fx_dot_f64", _words(files["dot_f64"], "<u8")),
            "#endif\n",
        ]
    )


def export_fixtures(
    src: ModelSource, f: GGUFFile, out: Path, names: list[str], rows: int, forward: str | None = None
) -> dict:
    """The fixtures of the tensors (:func:`choose`) and, with ``forward``, every layer's
    activations for that prompt (:mod:`q25deploy.packer.forward_fixtures`)."""
    if rows < 1:
        raise UsageError(f"--rows {rows}: give at least one row")
    files = {k: bytearray() for k in FILES}
    entries = []
    with open(src.path, "rb") as model:
        for t in choose(f, names):
            entry, data = _fixture(t, model, rows)
            entry["offsets"] = {k: len(files[k]) for k in FILES}
            for k in FILES:
                files[k] += data[k]
            entries.append(entry)
    sha = src.sha256 or file_sha256(src.path)
    index: dict[str, Any] = {
        "format": FORMAT,
        "model": {"sha256": sha, "name": f.metadata.get("general.name")},
        "files": FILES,
        "byte_order": "little",
        "dot": "sum over k of values[row][k] * x[k]: dot_f32 in float32, each product and each partial sum "
        "rounded to float32, k ascending from 0.0f; dot_f64 the exact sum rounded once to float64",
        "fixtures": entries,
    }
    activations = None
    if forward is not None:
        from .forward_fixtures import forward_activations

        index["forward"], activations = forward_activations(f, forward)
    with OutputDir(out, "fixtures") as o:
        if activations is not None:
            o.write(index["forward"]["file"], activations, "fixture-forward-activations")
        for k, rel in FILES.items():
            o.write(rel, bytes(files[k]), f"fixture-{k.replace('_', '-')}")
        o.write_json(INDEX, index, "fixture-index")
        o.write(HEADER, c_header(index, {k: bytes(v) for k, v in files.items()}).encode(), "fixture-c-header")
    return index
