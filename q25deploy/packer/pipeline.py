"""``q25deploy build``: everything one target needs, in one directory.

The driver of :mod:`q25deploy.packer.stages`. It owns what the stages do not:

- **atomicity**: everything is written into an :class:`~q25deploy.packer.outputs.OutputDir`
  (a temporary sibling renamed over DIR when complete);
- **incrementality**: a stamp (``.q25deploy-stamp.json``, outside the manifest: it holds
  paths and mtimes) records the inputs; an unchanged build returns at once, before the
  plugins load when nothing it read changed (:mod:`~q25deploy.packer.quick`). DIR is input
  like any file from outside: the stamp is read through its schema (a malformed one is no
  stamp: a full build), no digest is taken from it, and it is written through a new file of
  a random name (``O_EXCL|O_NOFOLLOW``, :func:`~q25deploy.common.atomic_file`);
- **what changed, only**: a build made before (same content key) is served from the plan
  cache (:mod:`~q25deploy.packer.plan_cache`): only the partitions are made; otherwise
  :mod:`~q25deploy.packer.full_build` runs every stage (one pass per byte, stages reused
  from the last build and the content caches).

Reproducible: artifacts depend only on content (model bytes, board file, tool version).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__, layout, phases
from ..builddir import BuildDir
from ..common import json_bytes, write_atomic
from ..errors import OutputError, Q25Error, SchemaError
from ..model.source import cached_digest, resolve
from . import quick
from .request import BuildResult, Progress, Request

if TYPE_CHECKING:  # loaded when a build is not up to date (the no-op rebuild loads neither)
    from ..plugin.manager import PluginFailure, Target
    from .previous import Previous


def _intact_summary(out: Path) -> dict | None:
    """The last build's ``build.json`` when every file its manifest lists is there, a regular
    file of its size (all read through the schema, no link followed), else None."""
    d = BuildDir(out)
    try:
        for rel in d.manifest:
            d.check_file(rel)
        return d.info.raw
    except (OSError, SchemaError):
        return None


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
    from ..plugin.manager import plugin_versions

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
        "forward": req.forward_prompts,
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
    forward_prompts: int | None = 1,
    progress: Progress = lambda s: None,
) -> BuildResult:
    """``reserve``: a fixed reservation in bytes, over the board file's ``[layout] reserve``;
    ``forward_prompts``: the smoke prompts the forward record covers (None: all)."""
    asked = request(
        target_name,
        model=model,
        target_file=target_file,
        model_license=model_license,
        model_license_file=model_license_file,
        layer_release=layer_release,
        layer_maintainer=layer_maintainer,
        reserve=reserve,
        forward_prompts=forward_prompts,
    )
    return _build(asked, out, progress)


def request(
    target_name: str | None,
    *,
    model: str | None,
    target_file: str | None = None,
    model_license: str | None = None,
    model_license_file: str | None = None,
    layer_release: int = 0,
    layer_maintainer: str | None = None,
    reserve: int | None = None,
    forward_prompts: int | None = 1,
) -> dict:
    """What the user asked :func:`build` for, but the output folder: the quick check's request
    (:mod:`~q25deploy.packer.quick`)."""
    return {
        "target": target_name,
        "target_file": target_file,
        "model": model,
        "model_license": model_license,
        "model_license_file": model_license_file,
        "layer": [layer_release, layer_maintainer],
        "reserve": reserve,
        "forward": forward_prompts,
    }


def _build(asked: dict, out: Path | None, progress: Progress) -> BuildResult:
    target_name, model, target_file = asked["target"], asked["model"], asked["target_file"]
    model_license, model_license_file, reserve = asked["model_license"], asked["model_license_file"], asked["reserve"]
    layer_release, layer_maintainer = asked["layer"]
    fast_out = Path(out) if out else Path("q25-build") / target_name if target_name else None
    fast = _quick_check(asked, fast_out) if fast_out else None
    if fast is not None:
        return fast
    from ..plugin.manager import make_plugin_manager, resolve_target

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
        asked["forward"],
    )
    inputs = _inputs(pm, req)
    old = BuildDir(req.out).stamp()  # through the schema: a malformed stamp is no stamp (a full build)
    fast_record = _quick_record(pm, req, failures, asked) if model else None
    phases.mark("imports")  # Q25_PHASE_TIMES (bench/bench_build.py): the inputs read, the stamp checked
    last = _intact_summary(req.out) if old and old["inputs"] == inputs else None
    if old is not None and last is not None:
        if fast_record and old.get("quick") != fast_record:  # the next unchanged rebuild: quick
            _write_stamp(req.out, {**old, "quick": fast_record})
        return BuildResult(req.out, True, last, note, failures)
    if src.sha256 is None:  # known from the verified-digest cache (never from DIR: its stamp is input)
        src.sha256 = cached_digest(src.path)
    summary, keys, report = _made(pm, req, inputs, old, progress)
    phases.mark("commit")
    stamp = {"inputs": inputs, "keys": keys, "model_sha256": src.sha256}
    _write_stamp(req.out, {**stamp, **({"quick": fast_record} if fast_record else {})})
    return BuildResult(req.out, False, summary, note, failures, report)


def _write_stamp(out: Path, stamp: dict) -> None:
    """The stamp, through a new file of a random name beside it (``O_EXCL|O_NOFOLLOW``: nothing
    planted in DIR is written through), renamed over it."""
    try:
        write_atomic(out / layout.STAMP, json_bytes(stamp), sync=False)
    except OSError as e:
        raise OutputError(f"{out / layout.STAMP}: cannot write: {e.strerror}") from None


def _quick_check(asked: dict, out: Path) -> BuildResult | None:
    """The unchanged rebuild, found without the plugins (:mod:`~q25deploy.packer.quick`), or None."""
    if not asked["model"] or not (asked["target"] or asked["target_file"]):
        return None
    try:
        src = resolve(asked["model"])
    except (Q25Error, OSError):  # the full check reports it, in its order
        return None
    failures = quick.unchanged(BuildDir(out).stamp(), quick.request(asked, src.path))
    summary = _intact_summary(out) if failures is not None else None
    if summary is None:
        return None
    phases.mark("imports")
    if failures:
        from ..plugin.manager import PluginFailure

        return BuildResult(out, True, summary, "", [PluginFailure(*f) for f in failures])
    return BuildResult(out, True, summary, "", [])


def _quick_record(pm, req: Request, failures: list[PluginFailure], asked: dict) -> dict:
    """The stamp's ``quick`` record: what this check read (the board file, the plugins' modules)."""
    from ..plugin.manager import plugin_versions

    files = [getattr(pm.get_plugin(name), "__file__", None) for name in plugin_versions(pm)]
    board = os.path.abspath(str(req.target.board.source))
    return quick.record(
        quick.request(asked, req.src.path), board, [f for f in files if f], [[f.plugin, f.error] for f in failures]
    )


def _made(pm, req: Request, inputs: dict, old: dict | None, progress: Progress) -> tuple[dict, dict, dict]:
    """The build: served from the plan cache, or made in full (and then stored there)."""
    from . import plan_cache
    from .previous import Previous

    src = req.src
    key = plan_cache.key(inputs, src.sha256, src.reference, src.ollama, req.license_file) if src.sha256 else None
    served = _serve(req, key, Previous(req.out, old), progress) if key else None
    if served:
        return served
    from .full_build import run, short_switch_interval

    progress(f"reading {src.reference}")
    with short_switch_interval():
        made = run(pm, req, Previous(req.out, old), progress)
    assert src.sha256 is not None  # the pass computed it if nothing knew it
    key = key or plan_cache.key(inputs, src.sha256, src.reference, src.ollama, req.license_file)
    if key:
        plan_cache.store(key, src.sha256, req.out)
    return made


def _serve(req: Request, key: str, prev: Previous, progress: Progress) -> tuple[dict, dict, dict] | None:
    """The build from the plan cache (:mod:`~q25deploy.packer.plan_cache`), or None when it has
    no sound entry for ``key``: only the partitions are made, from the GGUF."""
    from . import plan_cache
    from .outputs import OutputDir

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
