"""Releases: what a build puts on a board, and what must travel to get it there. Pure.

A release is a content-addressed directory ``<install>/releases/<id>``: the runtime image
and its manifest, the partition map, the partitions (and ``q25tok`` with --runtime-bin),
described by ``release.json``; ``id`` is the first 16 hex digits of the sha256 of that
description. The board's state file lists, per release, each file's sha256; a file the
board already holds in a kept release is hard-linked on the board instead of uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ... import layout, schema
from ...builddir import BuildDir
from ...common import json_bytes, json_digest
from ...errors import DeployError
from ...schema import STATE_FORMAT

__all__ = [
    "STATE_FORMAT",
    "Release",
    "ReleaseFile",
    "Transfer",
    "plan_transfer",
    "release_from_build",
    "tokenizer_only",
]


@dataclass(frozen=True)
class ReleaseFile:
    rel: str  # path inside the release
    sha256: str
    size: int
    local: Path | None  # where it is on this machine (None: taken from the board)
    origin: tuple[BuildDir, str] | None = None  # (build directory, path in it): opened without following symlinks

    def open(self) -> BinaryIO:
        """The local file, for reading (a build's file never through a symlink)."""
        if self.origin is not None:
            return self.origin[0].open(self.origin[1])
        if self.local is None:
            raise DeployError(f"{self.rel} is not on this machine")
        return open(self.local, "rb")


@dataclass(frozen=True)
class Release:
    id: str
    files: tuple[ReleaseFile, ...]
    description: bytes  # release.json
    vocab_fingerprint: str
    image: str  # rel path of the tokenizer image
    #: the build's release id: this release's without --runtime-bin's q25tok, the id `package`
    #: names its artifact by (``q25-TARGET-release-ID``, ``q25-TARGET-tokenizer-ID``); equal to
    #: ``id`` for a full release of the build alone
    build_id: str = ""


def _describe(files: list[ReleaseFile], meta: dict) -> tuple[str, bytes]:
    body = {
        "format": "q25deploy-release/1",
        **meta,
        "files": [{"path": f.rel, "sha256": f.sha256, "size": f.size} for f in sorted(files, key=lambda f: f.rel)],
    }
    rid = json_digest(body)[:16]
    return rid, json_bytes({"id": rid, **body})


def release_from_build(build_dir: Path, runtime_bin: tuple[Path, str] | None = None) -> Release:
    """The release of a `q25deploy build` directory (digests from its manifest; every path
    checked by :mod:`q25deploy.schema`, no file read through a symlink)."""
    build = BuildDir(build_dir)
    manifest, info = build.manifest, build.info
    partitions = sorted(p for p in manifest if layout.is_partition(p))
    build.check_region_table()  # what q25tok load writes into physical memory: checked before it travels
    where = str(build.path / layout.MANIFEST)
    files = []
    for rel in layout.release_files(info.image_path, partitions):
        if rel in layout.OPTIONAL_RELEASE_FILES and rel not in manifest:
            continue  # a build of an older q25deploy: it deploys, only the board's weights API lacks its table
        local = build.check_file(rel)
        a = manifest[rel]
        name = schema.release_name(layout.release_name(rel), where, rel)
        files.append(ReleaseFile(name, a.sha256, a.size, local, (build, rel)))
    meta = {"target": info.target, "model_sha256": info.model_sha256, "vocab_fingerprint": info.vocab_fingerprint}
    build_id = _describe(files, meta)[0]
    if runtime_bin:
        path, digest = runtime_bin
        files.append(ReleaseFile(layout.RUNTIME_BIN, digest, path.stat().st_size, path))
    if len({f.rel for f in files}) != len(files):
        raise DeployError(f"{build_dir}: two release files have the same name; rebuild with q25deploy build")
    rid, desc = _describe(files, meta)
    return Release(rid, tuple(files), desc, meta["vocab_fingerprint"], info.image_name, build_id)


def tokenizer_only(build: Release, state: dict) -> Release:
    """The current release with only the tokenizer image (and its manifest) replaced;
    refused when the vocabulary differs from the deployed model's."""
    cur = state.get("releases", {}).get(state.get("current") or "")
    if not cur:
        raise DeployError("nothing is deployed on this board yet: do a full deploy before --tokenizer-only")
    if cur["vocab_fingerprint"] != build.vocab_fingerprint:
        raise DeployError(
            f"refusing --tokenizer-only: the new image's vocabulary fingerprint {build.vocab_fingerprint[:16]}… differs "
            f"from the deployed model's {cur['vocab_fingerprint'][:16]}… (token ids would not match the weights)"
        )
    new = {f.rel: f for f in build.files if f.rel in layout.tokenizer_update_names(build.image)}
    files = [
        new.pop(rel) if rel in new else ReleaseFile(rel, sha, size, None)
        for rel, (sha, size) in sorted(cur["files"].items())
    ]
    files += new.values()
    meta = {
        "target": cur.get("target"),
        "model_sha256": cur.get("model_sha256"),
        "vocab_fingerprint": build.vocab_fingerprint,
    }
    rid, desc = _describe(files, meta)
    return Release(rid, tuple(files), desc, build.vocab_fingerprint, build.image, build.build_id)


@dataclass(frozen=True)
class Transfer:
    uploads: tuple[ReleaseFile, ...]
    links: tuple[tuple[ReleaseFile, str], ...]  # (file, existing path on the board, relative to install dir)

    @property
    def payload_bytes(self) -> int:
        return sum(f.size for f in self.uploads)


def plan_transfer(release: Release, state: dict) -> Transfer:
    """Link what the board already has (same sha256 in a kept release), upload the rest."""
    have: dict[str, str] = {}
    for rid in (state.get("current"), state.get("previous")):
        for rel, (sha, _size) in (state.get("releases", {}).get(rid or "", {}).get("files", {}) or {}).items():
            have.setdefault(sha, f"releases/{rid}/{rel}")
    uploads, links = [], []
    for f in release.files:
        if f.sha256 in have:
            links.append((f, have[f.sha256]))
        elif f.local is None:
            raise DeployError(f"{f.rel} is neither on the board nor in the build")
        else:
            uploads.append(f)
    return Transfer(tuple(uploads), tuple(links))
