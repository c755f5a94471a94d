"""The full build: every stage of :mod:`q25deploy.packer.stages` run from the GGUF, for
:func:`q25deploy.packer.pipeline.build` when nothing is up to date and the plan cache has no
entry. What it owns:

- **one pass per byte**: the payload (:func:`~q25deploy.packer.payload.pack`: shared or
  copied, and hashed in the same read) runs in a worker thread while the main thread builds
  the tokenizer; digests the content cache (:mod:`~q25deploy.packer.digest_cache`) knows are
  not computed again;
- **reuse**: a stage whose content key did not change is hard-linked from the previous build
  instead of rewritten; tokenizer assets of a model built before come from the content cache;
- **progress**: one line per stage through the ``progress`` callback.
"""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from .. import __version__, layout, phases
from ..common import json_digest
from ..model.source import ModelSource, remember_digest
from ..tokenizer import cache as tokenizer_cache
from .outputs import OutputDir
from .previous import Previous
from .request import Progress, Request


@contextmanager
def short_switch_interval():
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


def run(pm, req: Request, prev: Previous, progress: Progress) -> tuple[dict, dict, dict]:
    from ..model.gguf import GGUFFile
    from . import stages
    from .probe import KIND as PROBE_KIND
    from .probe import probe_record

    src, target = req.src, req.target
    with (
        GGUFFile(src.path, refetch=src.refetch()) as f,
        OutputDir(req.out, "build") as o,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
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
        _forward_stage(o, f, src.sha256, ids if req.forward_prompts is None else ids[: req.forward_prompts], progress)
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
