"""Handlers of the model, tokenizer, runtime and build commands (``q25deploy.cli`` parses
the command line and maps errors to exit codes; these do the work and print results)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import Q25Error, UsageError


def _open_model(ref: str):
    from .gguf_reader import GGUFFile
    from .model_source import resolve

    src = resolve(ref)
    return src, GGUFFile(src.path)


def cmd_inspect(a: argparse.Namespace) -> int:
    from .catalog import build_catalog, render_catalog

    src, f = _open_model(a.model)
    with f:
        cat = build_catalog(src, f)
    if a.json:
        print(json.dumps(cat, indent=2, ensure_ascii=False))
    else:
        print(render_catalog(cat))
    return 0


def cmd_export_tokenizer(a: argparse.Namespace) -> int:
    from .model_source import file_sha256
    from .outputs import OutputDir
    from .progress import Progress
    from .tokenizer_assets import tokenizer_assets, write_assets
    from .vocab import vocab_from_gguf

    prog = Progress()
    prog.step(f"reading {a.model}")
    src, f = _open_model(a.model)
    with f:
        vocab = vocab_from_gguf(f)
        name = f.metadata.get("general.name", "")
    prog.step("hashing the source model")
    digest = src.sha256 or file_sha256(src.path)
    prog.step("building the PS bundle and the runtime image")
    assets, image_manifest = tokenizer_assets(
        vocab, source_sha256=digest, model_name=name if isinstance(name, str) else "", alignment=a.alignment
    )
    prog.step(f"writing {a.out}")
    with OutputDir(a.out) as out:
        write_assets(out, assets)
    prog.done()
    if a.json:
        print(json.dumps({"out": str(a.out), "image": image_manifest}, indent=2))
    else:
        print(f"wrote {len(assets) + 1} files to {a.out}")
        print(f"  runtime image {image_manifest['path']}: {image_manifest['size']:,} bytes, "
              f"vocab fingerprint {image_manifest['vocab_fingerprint'][:16]}")
    return 0


def cmd_export_tensors(a: argparse.Namespace) -> int:
    from .progress import Progress
    from .tensor_export import export_tensors

    prog = Progress()
    prog.step(f"exporting tensors of {a.model}")
    src, f = _open_model(a.model)
    with f:
        manifest = export_tensors(src, f, a.out)
    prog.done()
    total = sum(t["bytes"] for t in manifest["tensors"])
    if a.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(f"wrote {len(manifest['tensors'])} tensors ({total:,} bytes) to {a.out}/tensors")
    return 0


def cmd_targets(a: argparse.Namespace) -> int:
    from .boards import load_board
    from .plugin_manager import make_plugin_manager, registered_targets

    pm, failures = make_plugin_manager()
    rows = []
    for name, (plugin, spec) in registered_targets(pm, failures).items():
        row = {"name": name, "plugin": plugin, "description": spec.description, "board_file": str(spec.board_file)}
        try:
            board = load_board(spec.board_file)
            row["ddr_bytes"] = board.ddr_bytes
        except Q25Error as e:
            row["error"] = str(e)
        rows.append(row)
    _report_failures(failures)
    if a.json:
        print(json.dumps({"targets": rows, "failed_plugins": [{"plugin": f.plugin, "error": f.error}
                                                               for f in failures]}, indent=2))
    else:
        for r in rows:
            size = f"{r['ddr_bytes'] / (1 << 30):g} GiB DDR" if "ddr_bytes" in r else f"broken: {r['error']}"
            print(f"{r['name']:<10} {r['plugin']:<12} {size:<12} {r['description']}")
    return 0


def _report_failures(failures) -> None:
    for f in failures:
        print(f"q25deploy: warning: {f}", file=sys.stderr)


def cmd_build(a: argparse.Namespace) -> int:
    from .build import build
    from .progress import Progress

    prog = Progress()
    result = build(a.target, model=a.model, out=a.out, target_file=a.target_file, model_license=a.model_license,
                   model_license_file=a.model_license_file, layer_release=a.layer_release,
                   layer_maintainer=a.layer_maintainer, progress=prog.step)
    prog.done()
    _report_failures(result.failures)
    if a.json:
        print(json.dumps({"out": str(result.out), "up_to_date": result.up_to_date, "note": result.note,
                          **result.summary}, indent=2))
        return 0
    from .build_summary import render_summary

    print(render_summary(result))
    return 0


def _load_codec(image_path: str):
    from .codec import Codec
    from .image_reader import read_image_file

    return Codec(read_image_file(image_path))


def cmd_tokenize(a: argparse.Namespace) -> int:
    if a.text is not None and a.file:
        raise UsageError("give TEXT or --file, not both")
    codec = _load_codec(a.image)
    inputs: list[tuple[str, bytes]] = []
    if a.file:
        for fn in a.file:
            try:
                inputs.append((fn, Path(fn).read_bytes()))
            except OSError as e:
                raise UsageError(f"{fn}: cannot read: {e.strerror}") from None
    elif a.text is not None:
        inputs.append(("<arg>", os.fsencode(a.text)))
    else:
        inputs.append(("<stdin>", sys.stdin.buffer.read()))
    results = [(name, codec.encode(data, parse_special=a.special)) for name, data in inputs]
    if a.json:
        if a.file:
            print(json.dumps([{"file": n, "ids": ids} for n, ids in results]))
        else:
            print(json.dumps({"ids": results[0][1]}))
    else:
        for _n, ids in results:
            print(" ".join(map(str, ids)))
    return 0


def cmd_detokenize(a: argparse.Namespace) -> int:
    ids = []
    for s in a.ids:
        try:
            ids.append(int(s, 10))
        except ValueError:
            raise UsageError(f"{s!r} is not a token id") from None
    codec = _load_codec(a.image)
    data = codec.decode(ids, special=a.special)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def cmd_runtime_build(a: argparse.Namespace) -> int:
    from .progress import Progress
    from .runtime_build import build_runtime

    prog = Progress()
    prog.step("compiling the C runtime")
    manifest = build_runtime(a.out, cross=a.cross, sanitize=a.sanitize)
    prog.done()
    if a.json:
        print(json.dumps(manifest, indent=2))
    else:
        rt = manifest["runtime"]
        print(f"built q25tok, libq25tok.a and q25tok.h for {rt['target']} with {rt['toolchain']['cc']} in {a.out}")
    return 0


