"""The commands that read a model: ``inspect``, ``export tokenizer``, ``export tensors`` and
``export fixtures``."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_group, add_model_argument, emit, positive_pow2


def add_commands(sub) -> None:
    """Add inspect and export (tokenizer, tensors, fixtures) to the CLI's sub-parsers."""
    sp = sub.add_parser(
        "inspect",
        help="show a model's metadata, tensors, tokenizer and quant mix",
        description="Show the catalog of MODEL: metadata, tensor directory, tokenizer summary "
        "and quant mix. Reads the GGUF header only; tensor data is never read.",
    )
    add_model_argument(sp, required=True)
    sp.add_argument("--json", action="store_true", help="print the full catalog as JSON (for scripts)")
    sp.set_defaults(func=cmd_inspect)

    exs = add_group(
        sub,
        "export",
        help="export tokenizer assets or tensor payloads",
        description="Export a model's tokenizer assets (with the Q25TOKRT runtime image) or its "
        "tensor payloads into a directory.",
        what="what to export",
    )
    et = exs.add_parser(
        "tokenizer",
        help="write the tokenizer assets, PS bundle and Q25TOKRT runtime image",
        description="Write tokens.jsonl, merges.txt, token_types.bin, chat_template.txt, the PS "
        "bundle (token_index.bin, token_bytes.bin, merge_table_u32.bin), the Q25TOKRT runtime "
        "image and manifests into DIR. DIR is replaced atomically.",
    )
    add_model_argument(et, required=True)
    et.add_argument("--out", required=True, metavar="DIR", type=Path, help="output directory (replaced atomically)")
    et.add_argument(
        "--alignment",
        type=positive_pow2,
        default=4096,
        metavar="N",
        help="section alignment of the runtime image (power of two, default 4096)",
    )
    et.add_argument("--json", action="store_true", help="print the runtime image manifest as JSON")
    et.set_defaults(func=cmd_export_tokenizer)

    ex2 = exs.add_parser(
        "tensors",
        help="write one file per tensor, byte-identical to the GGUF payload",
        description="Write tensors/NAME.bin for every tensor (byte-identical to the GGUF payload, "
        "copied by the kernel) and tensor_payload_export_manifest.json into DIR.",
    )
    add_model_argument(ex2, required=True)
    ex2.add_argument(
        "--out", required=True, metavar="DIR", type=Path, help="output directory (tensors/ and the manifest go there)"
    )
    ex2.add_argument("--json", action="store_true", help="print the manifest as JSON")
    ex2.set_defaults(func=cmd_export_tensors)

    ex3 = exs.add_parser(
        "fixtures",
        help="write golden blocks, float32 values and dot products for testbenches",
        description="For each quant type in MODEL, the first and last tensor of that type (or each "
        "--tensor): a few rows' raw ggml blocks, their float32 values (bit-exact with gguf-py and "
        "q25_dequantize), an input vector and each row's dot product with it (float32 and float64), "
        "as little-endian files with fixtures.json and the C header q25_fixtures.h "
        "(docs/fixtures.md). DIR is replaced atomically; the same model gives the same bytes.",
    )
    add_model_argument(ex3, required=True)
    ex3.add_argument("--out", required=True, metavar="DIR", type=Path, help="output directory (replaced atomically)")
    ex3.add_argument(
        "--tensor",
        action="append",
        default=[],
        metavar="NAME",
        help="export this tensor (repeatable) instead of the first and last of each type",
    )
    ex3.add_argument(
        "--rows",
        type=int,
        default=2,
        metavar="N",
        help="rows per tensor (default 2; the first rows with finite values)",
    )
    ex3.add_argument(
        "--forward",
        metavar="PROMPT",
        help="also write every layer's activations for PROMPT (special tokens parsed) from the host "
        "reference forward pass: forward.f32, indexed in fixtures.json (docs/forward.md)",
    )
    ex3.add_argument("--json", action="store_true", help="print fixtures.json")
    ex3.set_defaults(func=cmd_export_fixtures)


def _open_model(ref: str):
    from ..model.gguf import GGUFFile
    from ..model.source import resolve

    src = resolve(ref)
    return src, GGUFFile(src.path, refetch=src.refetch())


def cmd_inspect(a: argparse.Namespace) -> int:
    from ..model.catalog import build_catalog, render_catalog

    src, f = _open_model(a.model)
    with f:
        cat = build_catalog(src, f)
    return emit(a, cat, render_catalog(cat))


def cmd_export_tokenizer(a: argparse.Namespace) -> int:
    from ..model.source import file_sha256
    from ..packer.outputs import OutputDir
    from ..tokenizer.assets import tokenizer_assets, write_assets
    from ..tokenizer.vocab import vocab_from_gguf
    from .progress import Progress, wanted

    prog = Progress(enabled=wanted(json=a.json), task="export")
    prog.step(f"reading {a.model}")
    src, f = _open_model(a.model)
    with f:
        vocab = vocab_from_gguf(f)
        name = f.metadata.get("general.name", "")
    prog.step("hashing the source model")
    digest = src.sha256 or file_sha256(src.path)
    prog.step("building the PS bundle and the runtime image")
    assets, image = tokenizer_assets(
        vocab, source_sha256=digest, model_name=name if isinstance(name, str) else "", alignment=a.alignment
    )
    prog.step(f"writing {a.out}")
    with OutputDir(a.out, "tokenizer") as out:
        write_assets(out, assets)
    prog.done()
    return emit(
        a,
        {"out": str(a.out), "image": image},
        f"wrote {len(assets) + 1} files to {a.out}\n  runtime image {image['path']}: {image['size']:,} "
        f"bytes, vocab fingerprint {image['vocab_fingerprint'][:16]}",
    )


def cmd_export_tensors(a: argparse.Namespace) -> int:
    from ..packer.tensors import export_tensors
    from .progress import Progress, wanted

    prog = Progress(enabled=wanted(json=a.json), task="export")
    prog.step(f"exporting tensors of {a.model}")
    src, f = _open_model(a.model)
    with f:
        manifest = export_tensors(src, f, a.out)
    prog.done()
    total = sum(t["bytes"] for t in manifest["tensors"])
    return emit(a, manifest, f"wrote {len(manifest['tensors'])} tensors ({total:,} bytes) to {a.out}/tensors")


def cmd_export_fixtures(a: argparse.Namespace) -> int:
    from ..packer.fixtures import export_fixtures
    from .progress import Progress, wanted

    prog = Progress(enabled=wanted(json=a.json), task="export")
    prog.step(f"exporting fixtures of {a.model}")
    src, f = _open_model(a.model)
    with f:
        index = export_fixtures(src, f, a.out, a.tensor, a.rows, a.forward)
    prog.done()
    types = sorted({e["type"] for e in index["fixtures"]})
    acts = f" and {len(index['forward']['activations'])} activations" if "forward" in index else ""
    return emit(a, index, f"wrote fixtures of {len(index['fixtures'])} tensors ({', '.join(types)}){acts} to {a.out}")
