"""A content-addressed cache of payload digests, like the tokenizer's: a tensor's sha256
depends only on the model's bytes (the entry's key: the model's sha256), a partition's on those
and on where the tensors go (the plan's content key). A build of a model built before (into
another directory, for another board, after a board file change) writes its partitions and
takes their digests from here instead of hashing the bytes again; a new plan of a known model
hashes only its partitions.

The entry is input: it is read through one schema, must name exactly the model's tensors and
the plan's partitions, and any flaw is a miss (the build hashes, then rewrites the entry).
Nothing here can make a board accept wrong bytes: the board verifies every partition against
the partition map's digest, whatever computed it. Entries are written atomically; the last
:data:`PLANS` plans of a model are kept."""

from __future__ import annotations

from pathlib import Path

from .. import schema
from ..common import cache_dir as default_cache_dir
from ..common import is_sha256, json_bytes, write_atomic
from ..errors import SchemaError

PLANS = 8


def _entry(model_sha: str, cache_dir: Path | None) -> Path | None:
    """The model's entry; None for a ``model_sha`` that is not a sha256 (a path part only as one)."""
    return (cache_dir or default_cache_dir()) / "payload" / f"{model_sha}.json" if is_sha256(model_sha) else None


def _load(path: Path | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    if path is None:
        return {}, {}
    try:
        return schema.parse_payload_digests(schema.loads(path.read_bytes(), str(path)), str(path))
    except (OSError, SchemaError):
        return {}, {}


def lookup(
    model_sha: str, names: set[str], plan_key: str, n_parts: int, cache_dir: Path | None = None
) -> tuple[dict[str, str] | None, list[str] | None]:
    """(tensor digests, partition digests) of this model and plan, each None when not cached."""
    tensors, plans = _load(_entry(model_sha, cache_dir))
    parts = plans.get(plan_key)
    return (
        dict(tensors) if tensors and set(tensors) == names else None,
        list(parts) if parts is not None and len(parts) == n_parts else None,
    )


def store(
    model_sha: str, tensor_sha: dict[str, str], plan_key: str, part_sha: list[str], cache_dir: Path | None = None
) -> None:
    """Record this model's tensor digests and this plan's partition digests; failures only
    cost a hashing pass next time."""
    path = _entry(model_sha, cache_dir)
    old_tensors, plans = _load(path)
    if path is None or (old_tensors == tensor_sha and plans.get(plan_key) == part_sha):
        return
    plans.pop(plan_key, None)
    plans[plan_key] = part_sha  # the newest last; the oldest dropped
    keep = [{"plan": k, "sha256": v} for k, v in list(plans.items())[-PLANS:]]
    doc = {"format": schema.PAYLOAD_DIGESTS_FORMAT, "tensors": tensor_sha, "partitions": keep}
    try:  # renamed into place when whole (no fsync: a lost entry costs one hashing pass)
        write_atomic(path, json_bytes(doc), sync=False)
    except OSError:
        pass
