"""``q25deploy build``: everything one target needs, in one directory.

The driver of :mod:`q25deploy.packer.stages`. It owns what the stages do not:

- **atomicity**: everything is written into an :class:`~q25deploy.packer.outputs.OutputDir`
  (a temporary sibling renamed over DIR when complete);
- **incrementality**: a stamp (``.q25deploy-stamp.json``, outside the manifest: it holds
  paths and mtimes) records the inputs; an unchanged build returns at once, and a stage whose
  content key did not change is hard-linked from the previous build instead of rewritten;
  tokenizer assets of a model built before come from the content cache;
- **overlap**: the payload copy and its two digest passes run in worker threads
  (``concurrent.futures``) while the main thread builds the tokenizer;
- **progress**: one line per stage through the ``progress`` callback.

Reproducible: artifacts depend only on content (model bytes, board file, tool version).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from .. import __version__
from ..common import json_bytes, json_digest
from ..model.source import ModelSource, cached_digest, remember_digest, resolve
from ..plugin.manager import PluginFailure, Target, make_plugin_manager, plugin_versions, resolve_target
from ..tokenizer import cache as tokenizer_cache
from . import layout
from .outputs import OutputDir
from .previous import Previous, read_json

Progress = Callable[[str], None]


@dataclass
class BuildResult:
    out: Path
    up_to_date: bool
    summary: dict
    note: str
    failures: list[PluginFailure]


@dataclass(frozen=True)
class Request:
    """What the user asked for, resolved: the target, the model, the licence and layer options."""

    target: Target
    src: ModelSource
    out: Path
    license_id: str | None
    license_file: str | None
    layer_release: int = 0  # PV 1.<release>+q25.<hash> of the model-assets recipe
    layer_maintainer: str | None = None  # the layer README's maintainer


def _outputs_intact(out: Path) -> bool:
    manifest = read_json(out / layout.MANIFEST)
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


def _inputs(pm, req: Request) -> dict:
    """Everything the outputs depend on, as the stamp records it."""
    st = req.src.path.stat()
    return {
        "tool": __version__,
        "target": req.target.name,
        "plugin": req.target.plugin,
        "plugins": plugin_versions(pm),
        "board_sha256": hashlib.sha256(Path(req.target.board.source).read_bytes()).hexdigest(),
        "model": {"path": str(req.src.path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns},
        "license": [req.license_id, _file_stamp(req.license_file)],
        "layer": [req.layer_release, req.layer_maintainer],
        **({"reserve": req.target.board.layout.reserve} if req.target.board.layout.reserve else {}),
    }


def with_reserve(target: Target, reserve: int) -> Target:
    """``target`` with ``build --reserve``'s fixed reservation instead of its board file's."""
    board = target.board
    return replace(target, board=replace(board, layout=replace(board.layout, reserve=reserve)))


def build(
    target_name: str | None,
    *,
    model: str | None = None,
    out: Path | None = None,
    target_file: str | None = None,
    model_license: str | None = None,
    model_license_file: str | None = None,
    layer_release: int = 0,
    layer_maintainer: str | None = None,
    reserve: int | None = None,
    progress: Progress = lambda s: None,
) -> BuildResult:
    """``reserve``: a fixed reservation in bytes, over the board file's ``[layout] reserve``."""
    pm, failures = make_plugin_manager()
    target = resolve_target(pm, failures, target_name, target_file)
    if reserve is not None:
        target = with_reserve(target, reserve)
    if model:
        src, note = resolve(model), ""
    else:
        from ..model.demo import default_model

        src, note = default_model()
    req = Request(
        target,
        src,
        Path(out) if out else Path("q25-build") / target.name,
        model_license,
        model_license_file,
        layer_release,
        layer_maintainer,
    )
    inputs = _inputs(pm, req)
    old = read_json(req.out / layout.STAMP)
    if old and old.get("inputs") == inputs and _outputs_intact(req.out):
        return BuildResult(req.out, True, read_json(req.out / layout.BUILD_INFO) or {}, note, failures)
    if src.sha256 is None:  # known from the verified-digest cache or the last build?
        src.sha256 = cached_digest(src.path)
        if src.sha256 is None and old and old.get("inputs", {}).get("model") == inputs["model"]:
            src.sha256 = old.get("model_sha256")
    progress(f"reading {src.reference}")
    with _short_switch_interval():
        summary, keys = _run(pm, req, Previous(req.out, old), progress)
    (req.out / layout.STAMP).write_bytes(json_bytes({"inputs": inputs, "keys": keys, "model_sha256": src.sha256}))
    return BuildResult(req.out, False, summary, note, failures)


@contextmanager
def _short_switch_interval():
    """Worker threads hash and copy outside the GIL; a short switch interval lets them take
    it back quickly between chunks while the main thread runs Python."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@dataclass
class Payload:
    """The partitions' and tensors' digests, from the worker threads or the last build."""

    tensor_sha: dict[str, str]
    part_sha: list[str]


def _start_payload(pool: ThreadPoolExecutor, src: ModelSource, p, o: OutputDir) -> dict[str, Future]:
    """Copy the tensors into the partitions and hash (tensors; partitions + file) in parallel."""
    from .payload import digest_pass, write_outputs

    path, n = str(src.path), len(p.files)
    return {
        "copy": pool.submit(write_outputs, path, p.pieces, [str(o.path(f)) for f in p.files], p.sizes),
        "tensors": pool.submit(digest_pass, path, p.pieces, n, p.sizes, file_digest=False, streams="pieces"),
        "outputs": pool.submit(
            digest_pass, path, p.pieces, n, p.sizes, file_digest=src.sha256 is None, streams="outputs"
        ),
    }


def _run(pm, req: Request, prev: Previous, progress: Progress) -> tuple[dict, dict]:
    from ..model.gguf import GGUFFile
    from . import stages
    from .probe import KIND as PROBE_KIND
    from .probe import probe_record

    src, target = req.src, req.target
    with GGUFFile(src.path) as f, OutputDir(req.out, "build") as o, ThreadPoolExecutor(max_workers=3) as pool:
        info = stages.model_info(f)
        lic = stages.licence(src, info, req.license_id, req.license_file)
        p = stages.plan(pm, target, f)
        # partitions: the same model and plan give the same files
        part_key = json_digest([src.sha256, p.key, __version__]) if src.sha256 else None
        old_tensor_sha = prev.tensor_digests({t.name for t in p.memory.tensors})
        reused = old_tensor_sha is not None and prev.reuse(o, "partitions", part_key, p.files)
        if not reused:
            progress("copying tensors into partitions")
        futures = {} if reused else _start_payload(pool, src, p, o)
        if src.sha256 is None:
            src.sha256 = futures["outputs"].result().file
            remember_digest(src.path, src.sha256)
        tok_key = _tokenizer_stage(o, prev, f, src.sha256, info, p, progress)
        payload = _finish_payload(o, prev, p, futures, old_tensor_sha)
        progress("writing the memory plan")
        pmap = stages.partition_map(target, p, src.sha256, info, payload.tensor_sha, payload.part_sha)
        o.write_json(layout.PARTITION_MAP, pmap, "partition-map")
        for rel, data, kind in stages.board_files(target, p, pmap):
            o.write(rel, data, kind)
        image_manifest = json.loads(o.path(layout.IMAGE_MANIFEST).read_text())
        summary = stages.summary(target, src, info, p, image_manifest)
        o.write_json(layout.BUILD_INFO, summary, "build-info")
        ids = _smoke_ids(o, summary)
        _forward_stage(o, f, src.sha256, ids, progress)
        progress("writing the BitBake layer")
        _layer_stage(pm, o, req, summary, p, lic, ids)
        progress("recording the tensor probe's digests")
        o.write_json(layout.PROBE_DIGESTS, probe_record(f, pmap, ids), PROBE_KIND)
    return summary, {"tokenizer": tok_key, "partitions": json_digest([src.sha256, p.key, __version__])}


def _tokenizer_stage(o: OutputDir, prev: Previous, f, model_sha: str, info, p, progress: Progress) -> str:
    """The tokenizer assets: linked from the last build, copied from the cache, or built."""
    from . import stages

    key = json_digest([model_sha, p.layout.alignment, __version__])
    if prev.reuse(o, "tokenizer", key, [r for r in prev.artifacts if r.startswith(layout.TOKENIZER_DIR + "/")]):
        return key  # unchanged since the last build of this directory: hard links
    hit = tokenizer_cache.lookup(key)
    if hit is not None:
        progress("copying the tokenizer assets from the cache")
        cached_dir, cached = hit
        for entry in cached:  # the cache's manifest rows (dicts), not Assets
            rel = stages.tokenizer_path(p.layout, entry["path"])
            shutil.copyfile(cached_dir / entry["path"], o.path(rel))
            o.record(rel, entry["kind"])
        return key
    progress("building the tokenizer assets and runtime image")
    assets = stages.tokenizer(f, model_sha, info, p.layout.alignment)
    for a in assets:
        o.write(stages.tokenizer_path(p.layout, a.path), a.data, a.kind)
    tokenizer_cache.store(key, assets)
    return key


def _finish_payload(o: OutputDir, prev: Previous, p, futures: dict[str, Future], old_tensor_sha) -> Payload:
    if not futures:  # reused from the last build
        return Payload(old_tensor_sha, [prev.artifacts[rel]["sha256"] for rel in p.files])
    for fut in futures.values():
        fut.result()  # re-raises a worker's error here
    payload = Payload(futures["tensors"].result().pieces, futures["outputs"].result().outputs)
    for rel, sha in zip(p.files, payload.part_sha):
        o.record(rel, "tensor-partition", sha256=sha)
    return payload


def _smoke_ids(o: OutputDir, summary: dict) -> list[list[int]]:
    """The smoke prompts' ids (host codec of the built image), also written to ``smoke_ids.json``."""
    from ..tokenizer.codec import Codec
    from ..tokenizer.image.reader import read_image_file
    from ..tokenizer.prompts import smoke_ids, smoke_record

    codec = Codec(read_image_file(o.path(summary["image"]["path"]), verify_crc=False))
    ids = smoke_ids(codec)
    o.write_json(layout.SMOKE_IDS, smoke_record(summary["image"]["sha256"], ids), "smoke-ids")
    return ids


def _forward_stage(o: OutputDir, f, model_sha: str, ids: list[list[int]], progress: Progress) -> None:
    """``model_hparams.txt`` and ``forward_record.json`` (from the content cache when this
    model and these prompts were run before); neither for a model the forward pass cannot run."""
    from ..errors import GGUFError
    from . import forward_record

    try:
        hp_text = forward_record.hparams_bytes(f)
    except GGUFError as e:
        progress(f"no forward record: {e}")
        return
    o.write(layout.HPARAMS, hp_text, forward_record.HPARAMS_KIND)
    o.write(layout.FORWARD_RECORD, forward_record.record_bytes(f, model_sha, ids, progress), forward_record.RECORD_KIND)


def _layer_stage(pm, o: OutputDir, req: Request, summary: dict, p, lic, ids: list[list[int]]) -> None:
    """The BitBake layer (``ids``: the smoke prompts' ids its oeqa test expects)."""
    from . import stages
    from .layer import write_layer

    rels = layout.release_files(summary["image"]["path"], p.files) + [layout.MEMORY_HEADER]
    rels = [rel for rel in rels if rel in o.artifacts or rel not in layout.OPTIONAL_RELEASE_FILES]
    artifacts = {rel: (o.path(rel), o.artifacts[rel]["sha256"], o.artifacts[rel]["size"]) for rel in rels}
    write_layer(
        o,
        stages.layer(
            pm, req.target, summary, p, artifacts, lic, ids, release=req.layer_release, maintainer=req.layer_maintainer
        ),
    )
