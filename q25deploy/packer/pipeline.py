"""``q25deploy build``: everything one target needs, in one directory.

The driver of :mod:`q25deploy.packer.stages`. It owns what the stages do not:

- **atomicity**: everything is written into an :class:`~q25deploy.packer.outputs.OutputDir`
  (a temporary sibling renamed over DIR when complete);
- **incrementality**: a stamp (``.q25deploy-stamp.json``, outside the manifest: it holds
  paths and mtimes) records the inputs; an unchanged build returns at once, and a stage whose
  content key did not change is hard-linked from the previous build instead of rewritten;
  tokenizer assets of a model built before come from the content cache;
- **one pass per byte**: the payload (:func:`~q25deploy.packer.payload.pack`: shared or
  copied, and hashed in the same read) runs in a worker thread while the main thread builds
  the tokenizer; digests the content cache (:mod:`~q25deploy.packer.digest_cache`) knows are
  not computed again;
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

from .. import __version__, phases
from ..common import json_bytes, json_digest
from ..model.source import ModelSource, cached_digest, remember_digest, resolve
from ..plugin.manager import PluginFailure, Target, make_plugin_manager, plugin_versions, resolve_target
from ..tokenizer import cache as tokenizer_cache
from . import layout, plan_cache
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
    payload: dict | None = None  # how the partitions were made (Payload.report); None when up to date


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
    phases.mark("imports")  # Q25_PHASE_TIMES (bench/bench_build.py): the inputs read, the stamp checked
    if old and old.get("inputs") == inputs and _outputs_intact(req.out):
        return BuildResult(req.out, True, read_json(req.out / layout.BUILD_INFO) or {}, note, failures)
    if src.sha256 is None:  # known from the verified-digest cache or the last build?
        src.sha256 = cached_digest(src.path)
        if src.sha256 is None and old and old.get("inputs", {}).get("model") == inputs["model"]:
            src.sha256 = old.get("model_sha256")
    key = plan_cache.key(inputs, src.sha256, src.reference, src.ollama, req.license_file) if src.sha256 else None
    served = _serve(req, key, Previous(req.out, old), progress) if key else None
    if served:
        summary, keys, report = served
    else:
        progress(f"reading {src.reference}")
        with _short_switch_interval():
            summary, keys, report = _run(pm, req, Previous(req.out, old), progress)
        assert src.sha256 is not None  # the pass computed it if nothing knew it
        key = key or plan_cache.key(inputs, src.sha256, src.reference, src.ollama, req.license_file)
        if key:
            plan_cache.store(key, src.sha256, req.out)
    phases.mark("commit")
    (req.out / layout.STAMP).write_bytes(json_bytes({"inputs": inputs, "keys": keys, "model_sha256": src.sha256}))
    return BuildResult(req.out, False, summary, note, failures, report)


def _serve(req: Request, key: str, prev: Previous, progress: Progress) -> tuple[dict, dict, dict] | None:
    """The build from the plan cache (:mod:`~q25deploy.packer.plan_cache`), or None when it has
    no sound entry for ``key``: only the partitions are made, from the GGUF."""
    assert req.src.sha256 is not None
    entry = plan_cache.lookup(key, req.src.sha256, req.src.path.stat().st_size)
    if entry is None:
        return None
    phases.mark("plan")
    progress("copying tensors into partitions (the rest from the plan cache)")
    try:
        with OutputDir(req.out, "build") as o:
            report = plan_cache.serve(entry, o, req.src.path, prev)
            phases.mark("payload")
    except plan_cache.Corrupt as e:
        progress(f"plan cache: {e}; building in full")
        return None
    return entry.summary, entry.keys, report


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
    """The partitions' and tensors' digests, and how the partitions were made (``report``:
    bytes shared with the GGUF, copied, hard-linked from the last build, read to hash, and
    where the digests came from; in the summary, never in an artifact)."""

    tensor_sha: dict[str, str]
    part_sha: list[str]
    report: dict


@dataclass
class _Job:
    """The payload pass under way in a worker thread, and the digests the cache already had."""

    future: Future
    tensor_sha: dict[str, str] | None
    part_sha: list[str] | None


def _start_payload(pool: ThreadPoolExecutor, src: ModelSource, p, o: OutputDir) -> _Job:
    """Put the tensors into the partitions in one pass (payload.pack), hashing only what the
    content cache does not know: nothing, the partitions (a new plan), or everything."""
    from . import digest_cache
    from .payload import pack

    tensor_sha = part_sha = None
    if src.sha256:
        tensor_sha, part_sha = digest_cache.lookup(src.sha256, {t.name for t in p.memory.tensors}, p.key, len(p.files))
    future = pool.submit(
        pack,
        str(src.path),
        p.pieces,
        [str(o.path(f)) for f in p.files],
        p.sizes,
        hash_pieces=tensor_sha is None,
        hash_outputs=part_sha is None,
        file_digest=src.sha256 is None,
    )
    return _Job(future, tensor_sha, part_sha)


def _run(pm, req: Request, prev: Previous, progress: Progress) -> tuple[dict, dict, dict]:
    from ..model.gguf import GGUFFile
    from . import stages
    from .probe import KIND as PROBE_KIND
    from .probe import probe_record

    src, target = req.src, req.target
    with GGUFFile(src.path) as f, OutputDir(req.out, "build") as o, ThreadPoolExecutor(max_workers=1) as pool:
        info = stages.model_info(f)
        lic = stages.licence(src, info, req.license_id, req.license_file)
        p = stages.plan(pm, target, f)
        phases.mark("plan")  # the GGUF's reader (numpy, gguf) loaded, its header read, the plan made
        # partitions: the same model and plan give the same files
        part_key = json_digest([src.sha256, p.key, __version__]) if src.sha256 else None
        old_tensor_sha = prev.tensor_digests({t.name for t in p.memory.tensors})
        reused = old_tensor_sha is not None and prev.reuse(o, "partitions", part_key, p.files)
        if not reused:
            progress("copying tensors into partitions")
        job = None if reused else _start_payload(pool, src, p, o)
        if src.sha256 is None:
            assert job is not None  # a reused stage has a known model digest
            src.sha256 = job.future.result().file
            remember_digest(src.path, src.sha256)
        tok_key = _tokenizer_stage(o, prev, f, src.sha256, info, p, progress)
        phases.mark("tokenizer")
        payload = _finish_payload(o, prev, p, job, old_tensor_sha, src.sha256)
        phases.mark("payload")  # the pass's end (its work overlapped the tokenizer stage)
        progress("writing the memory plan")
        pmap = stages.partition_map(target, p, src.sha256, info, payload.tensor_sha, payload.part_sha)
        o.write_json(layout.PARTITION_MAP, pmap, "partition-map")
        for rel, data, kind in stages.board_files(target, p, pmap):
            o.write(rel, data, kind)
        image_manifest = json.loads(o.path(layout.IMAGE_MANIFEST).read_text())
        summary = stages.summary(target, src, info, p, image_manifest)
        o.write_json(layout.BUILD_INFO, summary, "build-info")
        phases.mark("board files")
        ids = _smoke_ids(o, summary)
        _forward_stage(o, f, src.sha256, ids, progress)
        phases.mark("forward record")
        progress("writing the BitBake layer")
        _layer_stage(pm, o, req, summary, p, lic, ids)
        phases.mark("layer")
        progress("recording the tensor probe's digests")
        o.write_json(layout.PROBE_DIGESTS, probe_record(f, pmap, ids), PROBE_KIND)
        phases.mark("probe")
    keys = {"tokenizer": tok_key, "partitions": json_digest([src.sha256, p.key, __version__])}
    return summary, keys, payload.report


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
            o.record(rel, entry["kind"], sha256=entry["sha256"])  # the lookup just checked these bytes
        return key
    progress("building the tokenizer assets and runtime image")
    assets = stages.tokenizer(f, model_sha, info, p.layout.alignment)
    for a in assets:
        o.write(stages.tokenizer_path(p.layout, a.path), a.data, a.kind)
    tokenizer_cache.store(key, assets)
    return key


def _finish_payload(o: OutputDir, prev: Previous, p, job: _Job | None, old_tensor_sha, model_sha: str) -> Payload:
    from . import digest_cache

    total = sum(piece.nbytes for piece in p.pieces if piece.dst >= 0)
    if job is None:  # reused from the last build
        last = {"tensors": "last build", "partitions": "last build"}
        report = {"bytes": total, "linked": total, "shared": 0, "copied": 0, "hashed": 0, "digests": last}
        return Payload(old_tensor_sha, [prev.artifacts[rel]["sha256"] for rel in p.files], report)
    done = job.future.result()  # re-raises the worker's error here
    tensor_sha = job.tensor_sha if job.tensor_sha is not None else done.pieces
    part_sha = job.part_sha if job.part_sha is not None else done.outputs
    for rel, sha in zip(p.files, part_sha):
        o.record(rel, "tensor-partition", sha256=sha)
    if job.tensor_sha is None or job.part_sha is None:
        digest_cache.store(model_sha, tensor_sha, p.key, part_sha)
    report = {
        "bytes": total,
        "linked": 0,
        "shared": done.shared,
        "copied": done.copied,
        "hashed": done.read,
        "digests": {
            "tensors": "computed" if job.tensor_sha is None else "cache",
            "partitions": "computed" if job.part_sha is None else "cache",
        },
    }
    return Payload(tensor_sha, part_sha, report)


def _smoke_ids(o: OutputDir, summary: dict) -> list[list[int]]:
    """The smoke prompts' ids (host codec of the built image), also written to ``smoke_ids.json``."""
    from ..tokenizer.codec import Codec
    from ..tokenizer.image.reader import read_image_file
    from ..tokenizer.prompts import smoke_ids, smoke_record

    image_sha = summary["image"]["sha256"]
    key = json_digest([image_sha, __version__])  # the ids depend only on the image (and the codec)
    ids = tokenizer_cache.smoke_lookup(image_sha, key)
    if ids is None:
        ids = smoke_ids(Codec(read_image_file(o.path(summary["image"]["path"]), verify_crc=False)))
        tokenizer_cache.smoke_store(smoke_record(image_sha, ids), key)
    o.write_json(layout.SMOKE_IDS, smoke_record(image_sha, ids), "smoke-ids")
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
