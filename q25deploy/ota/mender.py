"""Mender artifacts, format version 3 (mender-artifact's Documentation/artifact-format-v3.md).

Outer tar, in this order: ``version``, ``manifest`` (``sha256  name`` lines of the payload
files as ``data/0000/<file>``, the header and ``version``, sorted by name, as
mender-artifact writes it), ``manifest.sig`` when signed, the header (``header-info``,
``headers/0000/type-info``, ``headers/0000/meta-data``) and ``data/0000`` with the payload
files. Both inner tars are compressed as mender-artifact's ``--compression`` does:
``gzip`` gives ``header.tar.gz`` and ``data/0000.tar.gz``, ``none`` gives ``header.tar`` and
``data/0000.tar`` (what a payload that does not compress wants). One module-image payload of type
``q25-release``: the update module ``q25-ota.sh`` installed as
``/usr/share/mender/modules/v3/q25-release`` handles it.

Provides and depends: a full release provides ``q25.release`` (its id),
``q25.vocab_fingerprint`` and ``q25.target`` and clears older ``q25.*`` values; a
tokenizer-only artifact depends on ``q25.vocab_fingerprint`` (the Mender client installs
it only over a release of the same vocabulary) and clears ``q25.release`` (the board
computes the new release id).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..board.ota_settings import check_name
from .archive import Entry, gzip_bytes, gzip_open, tar_bytes, write_tar
from .plan import OtaPlan

MODULE_TYPE = "q25-release"
FORMAT_VERSION = 3
COMPRESSIONS = {"gzip": ".tar.gz", "none": ".tar"}  # mender-artifact's names and suffixes


def compression_for(mode: str, choice: str | None) -> str:
    """``package --compression``'s default (None): gzip for a tokenizer-only artifact (its image
    compresses), none for a full release (its tensors are GGUF quant blocks, which gzip does not
    shrink: it would only cost the packaging and the board's install a pass of deflate)."""
    if choice is not None:
        return choice
    return "gzip" if mode == "tokenizer" else "none"


@dataclass(frozen=True)
class MenderHeader:
    device_types: tuple[str, ...]
    name: str
    provides: dict
    depends: dict
    clears: tuple[str, ...]


def header_for(plan: OtaPlan, device_types: tuple[str, ...]) -> MenderHeader:
    for d in device_types:
        check_name(d, "Mender device type")
    if plan.mode == "full":
        provides = {
            "q25.release": plan.build_release,
            "q25.target": plan.target,
            "q25.vocab_fingerprint": plan.vocab_fingerprint,
        }
        return MenderHeader(device_types, plan.artifact_name, provides, {}, ("q25.*",))
    image = next(f for f in plan.release_files if f.rel == plan.image)
    provides = {"q25.tokenizer_image": image.sha256, "q25.vocab_fingerprint": plan.vocab_fingerprint}
    return MenderHeader(
        device_types,
        plan.artifact_name,
        provides,
        {"q25.vocab_fingerprint": plan.vocab_fingerprint},
        ("q25.release", "q25.tokenizer_image"),
    )


def _json(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def header_tar(h: MenderHeader) -> bytes:
    info = {
        "payloads": [{"type": MODULE_TYPE}],
        "artifact_provides": {"artifact_name": h.name},
        "artifact_depends": {"device_type": list(h.device_types)},
    }
    type_info: dict = {"type": MODULE_TYPE, "artifact_provides": h.provides, "clears_artifact_provides": list(h.clears)}
    if h.depends:
        type_info["artifact_depends"] = h.depends
    meta = {"q25_format": "q25-ota-plan 1"}
    return tar_bytes(
        [
            Entry("header-info", _json(info), mode=0o600),
            Entry("headers/0000/type-info", _json(type_info), mode=0o600),
            Entry("headers/0000/meta-data", _json(meta), mode=0o600),
        ]
    )


def _entries(plan: OtaPlan) -> list[Entry]:
    return [Entry(f.name, f.data, f.path) for f in plan.files]


def manifest_text(version: bytes, header: bytes, plan: OtaPlan, compression: str = "gzip") -> bytes:
    sums = {f"data/0000/{f.name}": f.sha256 for f in plan.files}
    sums["header" + COMPRESSIONS[compression]] = hashlib.sha256(header).hexdigest()
    sums["version"] = hashlib.sha256(version).hexdigest()
    return "".join(f"{sums[n]}  {n}\n" for n in sorted(sums)).encode()


def write_artifact(
    out: BinaryIO,
    plan: OtaPlan,
    device_types: tuple[str, ...],
    *,
    scratch: Path,
    sign=None,
    compression: str = "gzip",
) -> MenderHeader:
    """Write the artifact onto ``out``; ``scratch`` holds the payload's tar meanwhile;
    ``sign(manifest) -> manifest.sig`` signs when given."""
    suffix = COMPRESSIONS[compression]
    h = header_for(plan, device_types)
    version = _json({"format": "mender", "version": FORMAT_VERSION})
    header = gzip_bytes(header_tar(h)) if compression == "gzip" else header_tar(h)
    manifest = manifest_text(version, header, plan, compression)
    head = [Entry("version", version, mode=0o600), Entry("manifest", manifest, mode=0o600)]
    if sign is not None:
        head.append(Entry("manifest.sig", sign(manifest), mode=0o600))
    head.append(Entry("header" + suffix, header, mode=0o600))
    data = scratch / ("0000" + suffix)
    with open(data, "wb") as raw:
        if compression == "gzip":
            with gzip_open(raw) as gz:
                write_tar(gz, _entries(plan))
        else:
            write_tar(raw, _entries(plan))
    write_tar(out, [*head, Entry("data/0000" + suffix, path=data, mode=0o600)])
    return h


def payload_tar(members: dict[str, bytes]) -> bytes:
    """The payload's tar (``data/0000``) out of :func:`read_members`, uncompressed."""
    if "data/0000.tar.gz" in members:
        import gzip

        return gzip.decompress(members["data/0000.tar.gz"])
    return members["data/0000.tar"]


def read_members(path: Path) -> dict[str, bytes]:
    """The outer members of an artifact (for tests and inspection; small artifacts)."""
    import tarfile

    with tarfile.open(path, "r:") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
