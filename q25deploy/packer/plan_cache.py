"""A content-keyed cache of builds, partitions left out: what ostree does for file trees.

A build is a function of its inputs' content: the model's bytes (its sha256, from the
stat-keyed digest cache), the board file, the options, the plugins' and q25deploy's versions
and the installed q25deploy's files (:func:`key`). When a build with the same key was made
before (into another directory: a new ``--out``, a directory removed and rebuilt), every
output but the partitions is taken from here, and the partitions are made from the GGUF by
the payload's one pass (shared or copied, nothing hashed), at the places the cached partition
map records: no GGUF header is parsed, numpy and gguf are not imported, no digest is computed
but the small files' own checks. The outputs are byte-identical to a cold build's.

Layout (under ``$XDG_CACHE_HOME/q25deploy/plans``): ``entries/MODEL-KEY.json`` (the build's
manifest rows and its groups of hard-linked files) and ``blobs/SHA256`` (each small file's
bytes, shared between entries). The last :data:`KEEP` entries of a model are kept, and blobs
no entry names are removed with the entries.

An entry is input like any other: read through :func:`q25deploy.schema.parse_plan_cache`, its
partition map through the partition map's own schema and checked against the entry, the model
and the artifacts' digests, every blob's bytes checked against its sha256 before it is used.
Any flaw is a miss: the build runs in full and writes the entry again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, layout, schema
from ..common import atomic_file, file_sha256, is_sha256, json_bytes, json_digest, write_atomic
from ..common import cache_dir as default_cache_dir
from ..errors import OutputError, SchemaError
from .payload import Piece

KEEP = 8  # entries kept per model
PARTITION_KIND = "tensor-partition"
MAX_SMALL = 1 << 28  # the small files' bytes (a build's are ~25 MB, most of them the tokenizer's)
_PACKAGES = ("q25deploy", "q25deploy._recipes", "q25deploy._targets", "q25deploy_plugins")


class Corrupt(Exception):
    """A blob whose bytes are not the entry's: the entry is not served."""


def _root(cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_dir()) / "plans"


def tool_fingerprint() -> str:
    """q25deploy as installed: every file of its packages (path, size, mtime). A source tree
    edited without a new version is another tool, whose builds are not served from here."""
    rows = []
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        for top in (spec.submodule_search_locations or []) if spec else []:
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for n in sorted(filenames):
                    with contextlib.suppress(OSError):
                        st = os.stat(os.path.join(dirpath, n))
                        rows.append([name, os.path.relpath(os.path.join(dirpath, n), top), st.st_size, st.st_mtime_ns])
    return json_digest(rows)


def key(inputs: dict, model_sha: str, reference: str, ollama: dict, license_file: str | None) -> str | None:
    """The content key of a build: the stamp's ``inputs`` with the model's and the licence
    file's content in place of their paths and times; None when the licence file cannot be read."""
    lic_sha = None
    if license_file:
        try:
            lic_sha = hashlib.sha256(Path(license_file).read_bytes()).hexdigest()
        except OSError:
            return None
    stable = {k: v for k, v in inputs.items() if k not in ("model", "license")}
    return json_digest(
        [schema.PLAN_CACHE_FORMAT, __version__, stable, inputs["license"][0], lic_sha, model_sha, reference, ollama]
        + [tool_fingerprint()]
    )


@dataclass(frozen=True)
class Entry:
    """A checked entry: what a served build writes."""

    artifacts: dict[str, schema.Artifact]
    links: list[list[str]]  # each group's first path is written, the others are hard links to it
    files: list[str]  # the partitions, in region order
    sizes: list[int]
    pieces: list[Piece]  # where each tensor's bytes go (from the cached partition map)
    summary: dict  # build.json
    keys: dict[str, str]  # the stamp's stage keys (computed as the full build computes them)
    blob_dir: Path

    def blob(self, rel: str) -> bytes:
        """``rel``'s bytes, checked against the entry's size and sha256 (:class:`Corrupt` if not)."""
        a = self.artifacts[rel]
        try:
            with open(self.blob_dir / a.sha256, "rb") as f:
                data = f.read(a.size + 1)
        except OSError as e:
            raise Corrupt(f"{rel}: {e.strerror}") from None
        if len(data) != a.size or hashlib.sha256(data).hexdigest() != a.sha256:
            raise Corrupt(f"{rel}: its blob is not the bytes the entry names")
        return data

    def origins(self) -> list[str]:
        """The files written from blobs: every artifact but the partitions and the links."""
        linked = {rel for group in self.links for rel in group[1:]}
        return [rel for rel, a in self.artifacts.items() if a.kind != PARTITION_KIND and rel not in linked]


def _entry_path(root: Path, model_sha: str, key_: str) -> Path:
    """The entry's file: its name made of two sha256s, else :class:`OSError` (never a path
    part from anything else)."""
    if not (is_sha256(model_sha) and is_sha256(key_)):
        raise OSError(f"not a plan-cache entry name: {model_sha!r:.80}, {key_!r:.80}")
    return root / "entries" / f"{model_sha}-{key_}.json"


def lookup(key_: str, model_sha: str, model_size: int, cache_dir: Path | None = None) -> Entry | None:
    """The checked entry of ``key_`` (for this model, of this size), or None."""
    root = _root(cache_dir)
    try:
        path = _entry_path(root, model_sha, key_)
        with open(path, "rb") as f:
            raw = f.read(schema.MAX_JSON + 1)
        if len(raw) > schema.MAX_JSON:
            return None
        got_key, got_model, artifacts, links = schema.parse_plan_cache(schema.loads(raw, str(path)), str(path))
        if (got_key, got_model) != (key_, model_sha):
            return None
        # a partition is the first of its group: the one the payload pass writes
        links = [sorted(g, key=lambda r: artifacts[r].kind != PARTITION_KIND) for g in links]
        entry = Entry(artifacts, links, [], [], [], {}, {}, root / "blobs")
        pmap = schema.parse_partition_map(schema.loads(entry.blob(layout.PARTITION_MAP), str(path)), str(path))
        summary = schema.obj(schema.loads(entry.blob(layout.BUILD_INFO), str(path)), str(path))
        return _checked(entry, pmap, summary, model_sha, model_size)
    except (OSError, SchemaError, Corrupt, AttributeError, KeyError, TypeError, ValueError):
        return None


def _checked(entry: Entry, pmap: dict, summary: dict, model_sha: str, model_size: int) -> Entry | None:
    """The entry with its plan, when the partition map, build.json and the artifacts agree."""
    regions, tensors = pmap["regions"], pmap["tensors"]
    parts = [rel for rel, a in entry.artifacts.items() if a.kind == PARTITION_KIND]
    files = [layout.partition_file(i) for i in range(len(regions))]
    if (
        pmap.get("model", {}).get("sha256") != model_sha
        or summary.get("model", {}).get("sha256") != model_sha
        or [r["index"] for r in regions] != list(range(len(regions)))
        or sorted(parts) != sorted(files)
        or any(
            entry.artifacts[f].sha256 != r["sha256"] or entry.artifacts[f].size != r["used"]
            for f, r in zip(files, regions)
        )
        or any(g[0] in parts and any(entry.artifacts[r].kind == PARTITION_KIND for r in g[1:]) for g in entry.links)
    ):
        return None
    if sum(entry.artifacts[rel].size for rel in entry.origins()) > MAX_SMALL:
        return None
    sizes = [r["used"] for r in regions]
    for t in tensors:
        if t["source_offset"] + t["bytes"] > model_size or t["offset"] + t["bytes"] > sizes[t["region"]]:
            return None
    placed = [(t["name"], t["source_offset"], t["bytes"], t["region"], t["offset"]) for t in tensors]
    plan_key = json_digest([[(r["base"], r["size"], r["used"]) for r in regions], placed])
    alignment = summary["image"]["alignment"]
    keys = {
        "tokenizer": json_digest([model_sha, alignment, __version__]),
        "partitions": json_digest([model_sha, plan_key, __version__]),
    }
    pieces = [Piece(*p) for p in placed]
    return Entry(entry.artifacts, entry.links, files, sizes, pieces, summary, keys, entry.blob_dir)


def store(key_: str, model_sha: str, out: Path, cache_dir: Path | None = None) -> None:
    """Record the build just committed in ``out`` under ``key_``; failures only cost a full
    build next time."""
    root = _root(cache_dir)
    try:
        entry = _entry_path(root, model_sha, key_)
        manifest = out / layout.MANIFEST
        artifacts = schema.parse_manifest(schema.loads(manifest.read_bytes(), str(manifest)), str(manifest))
        by_inode: dict[tuple[int, int], list[str]] = {}
        for rel in artifacts:
            st = os.lstat(out / rel)
            by_inode.setdefault((st.st_dev, st.st_ino), []).append(rel)
        links = sorted(sorted(g) for g in by_inode.values() if len(g) > 1)
        big = {rel for g in links if any(artifacts[r].kind == PARTITION_KIND for r in g) for rel in g}
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "entries").mkdir(parents=True, exist_ok=True)
        for rel, a in artifacts.items():
            blob = root / "blobs" / a.sha256
            if rel not in big and a.kind != PARTITION_KIND and not _intact(blob, a.sha256):
                with open(out / rel, "rb") as src, atomic_file(blob, sync=False) as f:
                    shutil.copyfileobj(src, f)
        rows = [{"path": a.path, "kind": a.kind, "sha256": a.sha256, "size": a.size} for a in artifacts.values()]
        doc = {"format": schema.PLAN_CACHE_FORMAT, "key": key_, "model_sha256": model_sha, "artifacts": rows}
        doc["links"] = links
        write_atomic(entry, json_bytes(doc), sync=False)
        _prune(root, model_sha)
    except (OSError, SchemaError):
        pass


def _intact(blob: Path, sha: str) -> bool:
    try:
        return file_sha256(blob) == sha
    except OSError:
        return False


def _prune(root: Path, model_sha: str) -> None:
    """Keep the model's last :data:`KEEP` entries; remove the blobs no entry names."""
    entries = sorted((root / "entries").glob(f"{model_sha}-*.json"), key=lambda p: p.stat().st_mtime_ns)
    if len(entries) <= KEEP:
        return
    for old in entries[:-KEEP]:
        old.unlink()
    named = set()
    for e in (root / "entries").glob("*.json"):
        try:
            named |= {a["sha256"] for a in json.loads(e.read_bytes())["artifacts"]}
        except (OSError, ValueError, KeyError, TypeError):
            e.unlink(missing_ok=True)  # unreadable: it could never be served
    for blob in (root / "blobs").iterdir():
        if blob.name not in named and not blob.name.startswith("."):
            blob.unlink(missing_ok=True)


class Copy:
    """The partitions of an entry being made from the GGUF in a worker thread (:func:`serve`)."""

    def __init__(self, entry: Entry, model_path: Path, o) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        from .payload import pack

        self.stop = threading.Event()
        paths = [str(o.path(f)) for f in entry.files]
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._job = self._pool.submit(
            pack,
            str(model_path),
            entry.pieces,
            paths,
            entry.sizes,
            hash_pieces=False,
            hash_outputs=False,
            stop=self.stop,
        )
        self._pool.shutdown(wait=False)

    def result(self):
        """The :class:`~q25deploy.packer.payload.Packed` report; the copy's error raises here."""
        return self._job.result()

    def cancel(self) -> None:
        """Stop between chunks and wait until the thread no longer writes."""
        self.stop.set()
        try:
            self._job.result()
        except Exception:  # noqa: BLE001 - stopped, or failed: either way nothing writes any more
            pass


def serve(entry: Entry, o, model_path: Path, prev) -> dict:
    """Write the entry's build into ``o`` (an :class:`~q25deploy.packer.outputs.OutputDir`):
    the partitions linked from the last build (``prev``) when its key is this one's, else made
    from the GGUF by the payload's pass (:class:`Copy`) while the small files are written from
    their checked blobs. Returns the payload's report; raises :class:`Corrupt`."""
    total = sum(p.nbytes for p in entry.pieces)
    linked = prev.reuse(o, "partitions", entry.keys["partitions"], entry.files)
    job = None if linked else Copy(entry, model_path, o)
    try:
        for rel in entry.origins():
            _written(o, rel, lambda p, rel=rel: p.write_bytes(entry.blob(rel)))
            o.record(rel, entry.artifacts[rel].kind, sha256=entry.artifacts[rel].sha256)
        done = job.result() if job else None
    except BaseException:
        if job:
            job.cancel()  # nothing may write into ``o`` once it is removed
        raise
    for rel in [] if linked else entry.files:
        o.record(rel, PARTITION_KIND, sha256=entry.artifacts[rel].sha256)
    for first, *others in entry.links:
        for rel in others:
            _written(o, rel, lambda p, first=first: os.link(o.path(first), p))
            o.record(rel, entry.artifacts[rel].kind, sha256=entry.artifacts[rel].sha256)
    how = {"tensors": "plan cache", "partitions": "last build" if linked else "plan cache"}
    return {
        "bytes": total,
        "linked": total if linked else 0,
        "shared": done.shared if done else 0,
        "copied": done.copied if done else 0,
        "hashed": 0,
        "digests": how,
    }


def _written(o, rel: str, write) -> None:
    """``write(path)`` of ``rel`` in ``o``; a failure is the user's to act on (a full disk)."""
    try:
        write(o.path(rel))
    except OSError as e:
        raise OutputError(f"{o.dest / rel}: cannot write: {e.strerror}") from None
