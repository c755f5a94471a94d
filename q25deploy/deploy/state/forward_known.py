"""What the board's state says of the forward pass each kept release passed, so that a deploy
whose weights, q25tok and record are those that passed does not run the pass again (a
tokenizer-only update, a redeploy of the same build).

The key is the content the pass depends on: the partition map (every region's and tensor's
sha256 and address), the q25tok that runs it (its sha256 on the board), the record's prompts,
steps and tolerances, and where the weights are read (the reserved regions, proven to hold the
partitions by ``q25tok verify``, or the partition files). A pass is deterministic in these, so
the same key passes again; anything else runs it. ``q25deploy smoke`` always runs it.
"""

from __future__ import annotations

from ...common import json_digest


def forward_key(partition_map: dict, q25tok_sha256: str, record: dict, source: str) -> str:
    """The content a forward pass's result depends on (``source``: "mem" or "files")."""
    return json_digest(["q25-forward/1", json_digest(partition_map), q25tok_sha256, json_digest(record), source])


def verified(state: dict) -> dict[str, str]:
    """key → the release at which the pass with that key ran and passed, over the kept releases."""
    out: dict[str, str] = {}
    for rid, rec in state.get("releases", {}).items():
        fw = rec.get("forward")
        if fw:
            out.setdefault(fw["key"], fw.get("release") or rid)
    return out


def recorded(state: dict, release_id: str, smoke: dict) -> dict | None:
    """``state`` with ``release_id``'s record holding the forward pass ``smoke`` passed (its
    ``forward`` entry: key, prompts, the release it ran at), or None when there is nothing new."""
    fw = smoke.get("forward")
    rec = state.get("releases", {}).get(release_id)
    if not smoke.get("ok") or not fw or rec is None or rec.get("forward") == fw:
        return None
    return {**state, "releases": {**state["releases"], release_id: {**rec, "forward": fw}}}
