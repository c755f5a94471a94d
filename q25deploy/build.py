"""``q25deploy build``: everything one target needs, in one directory.

Writes, atomically (a temporary sibling renamed over DIR when complete):
``tokenizer/`` (assets and the Q25TOKRT image laid out for the target), ``partitions/``
(one file per reserved region), ``partition_map.json``, ``q25_memory_map.h``,
``reserved-memory.dtsi``, ``memory-map.svg``, ``build.json`` and ``manifest.json``.

Incremental: a stamp (``.q25deploy-stamp.json``, outside the manifest: it holds paths and
mtimes) records the inputs; an unchanged build returns at once, and a stage whose inputs
did not change is hard-linked from the previous build instead of being rewritten.
Reproducible: artifacts depend only on content (model bytes, board file, tool version).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from . import __version__, tokenizer_cache
from .model_source import ModelSource, cached_digest, resolve
from .outputs import MANIFEST, json_bytes
from .plugin_manager import PluginFailure, Target, make_plugin_manager, resolve_target

STAMP = ".q25deploy-stamp.json"
BUILD_INFO = "build.json"
TOKENIZER_DIR = "tokenizer"


@dataclass
class BuildResult:
    out: Path
    up_to_date: bool
    summary: dict
    note: str
    failures: list[PluginFailure]


def _plugin_versions(pm) -> dict[str, str]:
    versions = {}
    for ep in metadata.entry_points(group="q25deploy"):
        if pm.has_plugin(ep.name):
            dist = getattr(ep, "dist", None)
            versions[ep.name] = f"{dist.name} {dist.version}" if dist else "?"
    return dict(sorted(versions.items()))


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text("utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _outputs_intact(out: Path) -> bool:
    manifest = _read_json(out / MANIFEST)
    if not manifest:
        return False
    try:
        return all((out / a["path"]).stat().st_size == a["size"] for a in manifest["artifacts"])
    except (OSError, KeyError, TypeError):
        return False


def _file_stamp(path: str | None) -> list | None:
    if not path:
        return None
    try:
        st = os.stat(path)
        return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]
    except OSError:
        return [path]


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def build(target_name: str | None, *, model: str | None = None, out: Path | None = None,
          target_file: str | None = None, model_license: str | None = None, model_license_file: str | None = None,
          layer_release: int = 0, layer_maintainer: str | None = None,
          progress: Callable[[str], None] = lambda s: None) -> BuildResult:
    pm, failures = make_plugin_manager()
    target = resolve_target(pm, failures, target_name, target_file)
    if model:
        src, note = resolve(model), ""
    else:
        from .demo_model import default_model

        src, note = default_model()
    out = Path(out) if out else Path("q25-build") / target.name
    st = src.path.stat()
    board_bytes = Path(target.board.source).read_bytes()
    inputs = {
        "tool": __version__,
        "target": target.name,
        "plugin": target.plugin,
        "plugins": _plugin_versions(pm),
        "board_sha256": hashlib.sha256(board_bytes).hexdigest(),
        "model": {"path": str(src.path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns},
        "license": [model_license, _file_stamp(model_license_file)],
        "layer": [layer_release, layer_maintainer],
    }
    old = _read_json(out / STAMP)
    if old and old.get("inputs") == inputs and _outputs_intact(out):
        summary = _read_json(out / BUILD_INFO) or {}
        return BuildResult(out, True, summary, note, failures)
    if src.sha256 is None:  # known from the verified-digest cache or the last build?
        src.sha256 = cached_digest(src.path)
        if src.sha256 is None and old and old.get("inputs", {}).get("model") == inputs["model"]:
            src.sha256 = old.get("model_sha256")
    progress(f"reading {src.reference}")
    # worker threads hash and copy outside the GIL; a short switch interval lets them take it
    # back quickly between chunks while the main thread runs Python
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        summary, keys, model_sha = _write_build(pm, target, src, out, old, progress,
                                                {"id": model_license, "file": model_license_file,
                                                 "release": layer_release, "maintainer": layer_maintainer})
    finally:
        sys.setswitchinterval(interval)
    (out / STAMP).write_bytes(json_bytes({"inputs": inputs, "keys": keys, "model_sha256": model_sha}))
    return BuildResult(out, False, summary, note, failures)


def _write_build(pm, target: Target, src: ModelSource, out: Path, old: dict | None, progress, licensing):
    from .gguf_reader import GGUFFile

    f = GGUFFile(src.path)
    try:
        return _write_build_from(pm, target, src, out, old, progress, f, licensing)
    finally:
        f.close()


def _write_layer(pm, o, target: Target, summary: dict, dtsi: str, part_files: list[str], licensing: dict) -> None:
    from .codec import Codec
    from .image_reader import read_image_file
    from .layer import (DEVICE_TREE_DIR, LayerFile, _static_files, assets_recipe_pv, layer_readme, merge_hook_results,
                        model_assets_files, smoke_test_case, write_layer)
    from .smoke_prompts import SMOKE_PROMPTS

    board = target.board
    rels = [summary["image"]["path"], f"{TOKENIZER_DIR}/tokenizer_runtime_image_manifest.json",
            "partition_map.json", "q25_memory_map.h", *part_files]
    artifacts = {rel: (o.path(rel), o.artifacts[rel]["sha256"], o.artifacts[rel]["size"]) for rel in rels}
    files = _static_files()
    files += model_assets_files(board, summary, artifacts, license_id=licensing.get("id"),
                                license_file=licensing.get("file"), release=licensing.get("release", 0))
    codec = Codec(read_image_file(o.path(summary["image"]["path"]), verify_crc=False))
    files.append(smoke_test_case(summary, [(t, sp, codec.encode(t, sp)) for t, sp in SMOKE_PROMPTS]))
    extra = merge_hook_results(pm.hook.q25deploy_layer_files(target=target.name, board=board,
                                                             build={"dtsi": dtsi, "summary": summary}))
    by_path = {f.path: f for f in files}
    for path, data in extra.items():
        if data is None:
            by_path.pop(path, None)
        else:
            by_path[path] = LayerFile(path, data)
    by_path["README.md"] = layer_readme(summary, board, any(p.startswith(f"{DEVICE_TREE_DIR}/") for p in by_path),
                                        pv=assets_recipe_pv(files), maintainer=licensing.get("maintainer"))
    write_layer(o, list(by_path.values()))


def _write_build_from(pm, target: Target, src: ModelSource, out: Path, old: dict | None, progress, f, licensing):
    from .memory_header import memory_header
    from .memory_svg import memory_svg
    from .model_source import remember_digest
    from .outputs import OutputDir
    from .partition import assemble
    from .payload import Piece, check_plain_names, digest_pass, write_outputs
    from .tokenizer_assets import tokenizer_assets
    from .vocab import vocab_from_gguf

    board, name = target.board, target.name
    check_plain_names(f.tensors)
    partitions = pm.hook.q25deploy_partition_plan(target=name, board=board, tensors=f.tensors)
    regions = pm.hook.q25deploy_reserved_regions(target=name, board=board, partitions=partitions)
    plan = assemble(partitions, regions, board.model_budget)
    layout = pm.hook.q25deploy_image_layout(target=name, board=board)
    model_name = f.metadata.get("general.name", "")
    model_name = model_name if isinstance(model_name, str) else ""
    license_id = f.metadata.get("general.license")
    dtsi = pm.hook.q25deploy_reserved_memory_dtsi(target=name, board=board, plan=plan)
    old_keys = (old or {}).get("keys", {})
    old_map = _read_json(out / "partition_map.json") or {}
    old_manifest = {a["path"]: a for a in (_read_json(out / MANIFEST) or {}).get("artifacts", [])}

    pieces = [Piece(t.name, t.source_offset, t.nbytes, t.region, t.offset) for t in plan.tensors]
    part_files = [f"partitions/region_{r.index:02d}.bin" for r in plan.regions]
    sizes = [r.used for r in plan.regions]
    plan_key = _sha([[(r.base, r.size, r.used) for r in plan.regions],
                     [(t.name, t.source_offset, t.nbytes, t.region, t.offset) for t in plan.tensors]])

    with OutputDir(out) as o:
        def reuse(rel: str) -> bool:
            prev = old_manifest.get(rel)
            if not prev or not (out / rel).is_file():
                return False
            os.link(out / rel, o.path(rel))
            o.record(rel, prev["kind"], sha256=prev["sha256"])
            return True

        results: dict[str, Any] = {}
        errors: list[BaseException] = []

        def run(key: str, fn) -> threading.Thread:
            def body():
                try:
                    results[key] = fn()
                except BaseException as e:  # re-raised in the main thread
                    errors.append(e)
            th = threading.Thread(target=body, name=key)
            th.start()
            return th

        # partitions: the same model and plan give the same files
        partitions_key = _sha([src.sha256, plan_key, __version__]) if src.sha256 else None
        reused = bool(partitions_key and old_keys.get("partitions") == partitions_key
                      and old_map.get("tensors") and all(reuse(rel) for rel in part_files))
        threads = []
        if not reused:
            progress("copying tensors into partitions")
            threads.append(run("copy", lambda: write_outputs(str(src.path), pieces, [str(o.path(p)) for p in part_files],
                                                              sizes)))
            # two hashing threads (tensor digests; partition digests + the file's when unknown)
            threads.append(run("tensor-digests", lambda: digest_pass(str(src.path), pieces, len(part_files), sizes,
                                                                      file_digest=False, streams="pieces")))
            threads.append(run("digests", lambda: digest_pass(str(src.path), pieces, len(part_files), sizes,
                                                               file_digest=src.sha256 is None, streams="outputs")))

        def join():
            for th in threads:
                th.join()
            if errors:
                raise errors[0]

        # tokenizer: the same model and image alignment give the same files
        if src.sha256 is None:
            join()
            src.sha256 = results["digests"].file
            remember_digest(src.path, src.sha256)
        tok_key = _sha([src.sha256, layout.alignment, __version__])
        tok_old = [rel for rel in old_manifest if rel.startswith(TOKENIZER_DIR + "/")]

        def tok_rel(path: str) -> str:
            return f"{TOKENIZER_DIR}/{layout.filename if path == 'tokenizer.q25tokrt' else path}"

        if old_keys.get("tokenizer") == tok_key and tok_old and all(reuse(rel) for rel in tok_old):
            pass  # unchanged since the last build of this directory: hard links
        elif (hit := tokenizer_cache.lookup(tok_key)) is not None:
            progress("copying the tokenizer assets from the cache")
            cached_dir, cached = hit
            for a in cached:
                shutil.copyfile(cached_dir / a["path"], o.path(tok_rel(a["path"])))
                o.record(tok_rel(a["path"]), a["kind"])
        else:
            progress("reading the tokenizer")
            vocab = vocab_from_gguf(f)
            progress("building the tokenizer assets and runtime image")
            assets, _ = tokenizer_assets(vocab, source_sha256=src.sha256, model_name=model_name,
                                         alignment=layout.alignment)
            for a in assets:
                o.write(tok_rel(a.path), a.data, a.kind)
            tokenizer_cache.store(tok_key, assets)
        image_manifest = json.loads(o.path(f"{TOKENIZER_DIR}/tokenizer_runtime_image_manifest.json").read_text())
        join()
        progress("writing the memory plan")
        if reused:
            tensor_sha = {t["name"]: t["sha256"] for t in old_map["tensors"]}
            part_sha = [old_manifest[rel]["sha256"] for rel in part_files]
        else:
            tensor_sha, part_sha = results["tensor-digests"].pieces, results["digests"].outputs
            for rel, sha in zip(part_files, part_sha):
                o.record(rel, "tensor-partition", sha256=sha)
        pmap = {
            "format": "q25deploy-partition-map/1",
            "target": name,
            "model": {"sha256": src.sha256, "name": model_name},  # content only: no paths
            "regions": [
                {"index": r.index, "label": r.label, "node": r.node_name, "base": r.base, "size": r.size,
                 "used": r.used, "bank": r.bank, "file": rel, "sha256": sha}
                for r, rel, sha in zip(plan.regions, part_files, part_sha)
            ],
            "tensors": [
                {"name": t.name, "region": t.region, "address": plan.address(t), "offset": t.offset,
                 "bytes": t.nbytes, "type": t.type_name, "shape": list(t.shape), "sha256": tensor_sha[t.name],
                 "source_offset": t.source_offset}
                for t in plan.tensors
            ],
        }
        o.write_json("partition_map.json", pmap, "partition-map")
        o.write("q25_memory_map.h", memory_header(board, plan).encode(), "memory-map-header")
        o.write("reserved-memory.dtsi", dtsi.encode(), "reserved-memory-dtsi")
        o.write("memory-map.svg", memory_svg(board, plan).encode(), "memory-map-svg")
        summary = {
            "target": name,
            "plugin": target.plugin,
            "board": {"name": board.name, "description": board.description},
            "model": {"reference": src.reference, "sha256": src.sha256, "name": model_name,
                      "license": license_id if isinstance(license_id, str) else None,
                      "ollama": src.ollama or None},
            "image": {"path": f"{TOKENIZER_DIR}/{layout.filename}", "install_dir": layout.install_dir,
                      "alignment": layout.alignment, "size": image_manifest["size"],
                      "sha256": image_manifest["sha256"], "vocab_fingerprint": image_manifest["vocab_fingerprint"]},
            "memory": {"budget": plan.budget, "reserved": plan.reserved_bytes,
                       "regions": [{"label": r.label, "base": r.base, "size": r.size, "used": r.used, "bank": r.bank}
                                   for r in plan.regions]},
            "tensors": len(plan.tensors),
        }
        o.write_json(BUILD_INFO, summary, "build-info")
        progress("writing the BitBake layer")
        _write_layer(pm, o, target, summary, dtsi, part_files, licensing)
    keys = {"tokenizer": tok_key, "partitions": _sha([src.sha256, plan_key, __version__])}
    return summary, keys, src.sha256
