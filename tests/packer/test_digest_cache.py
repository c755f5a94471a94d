"""The payload-digest cache: a model built before is written without hashing it again, a new
plan of it hashes only its partitions, and a damaged entry is a miss, never a wrong build.
These are the builds the plan cache (tests/packer/test_plan_cache.py) does not serve: its
entries are removed before each build after the first."""

from __future__ import annotations

import hashlib
import json
import shutil

from q25deploy.cli import main
from q25deploy.packer.pipeline import build


def digests(out) -> dict:
    """Each partition's manifest digest against its bytes, and the partition map's tensor digests."""
    manifest = json.loads((out / "manifest.json").read_text())
    parts = {a["path"]: a["sha256"] for a in manifest["artifacts"] if a["kind"] == "tensor-partition"}
    for rel, sha in parts.items():
        assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == sha
    pmap = json.loads((out / "partition_map.json").read_text())
    return {"parts": parts, "tensors": {t["name"]: t["sha256"] for t in pmap["tensors"]}}


def forget_plans(tmp_path) -> None:
    """No plan-cache entry: the build below runs every stage, with the digest cache under it."""
    shutil.rmtree(tmp_path / "cache" / "q25deploy" / "plans", ignore_errors=True)


def test_a_model_built_before_is_written_without_hashing(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    a = build("kv260", model=str(qwen25_tiny), out=tmp_path / "a")
    assert a.payload and a.payload["digests"] == {"tensors": "computed", "partitions": "computed"}
    assert a.payload["hashed"] >= a.payload["bytes"] > 0  # every byte read once (the file's digest too)
    forget_plans(tmp_path)
    b = build("kv260", model=str(qwen25_tiny), out=tmp_path / "b")
    assert b.payload and b.payload["digests"] == {"tensors": "cache", "partitions": "cache"}
    assert b.payload["hashed"] == 0 and b.payload["copied"] + b.payload["shared"] == b.payload["bytes"]
    for rel in ("manifest.json", "partition_map.json", "partitions/region_00.bin"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    # another plan of the same model: tensor digests from the cache, partitions hashed
    c = build("kv260", model=str(qwen25_tiny), out=tmp_path / "c", reserve=64 << 20)
    assert c.payload and c.payload["digests"] == {"tensors": "cache", "partitions": "computed"}
    assert digests(tmp_path / "c")["tensors"] == digests(tmp_path / "a")["tensors"]


def test_a_damaged_cache_entry_is_a_miss(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    a = build("kv260", model=str(qwen25_tiny), out=tmp_path / "a")
    (entry,) = (tmp_path / "cache" / "q25deploy" / "payload").iterdir()
    doc = json.loads(entry.read_text())
    name = next(iter(doc["tensors"]))
    for i, damage in enumerate(
        (
            lambda d: d["tensors"].pop(name),  # not the model's tensors
            lambda d: d["tensors"].__setitem__(name, "not a digest"),
            lambda d: d["partitions"][0]["sha256"].append("0" * 64),  # not the plan's partitions
        )
    ):
        bad = json.loads(json.dumps(doc))
        damage(bad)
        entry.write_text(json.dumps(bad))
        forget_plans(tmp_path)
        r = build("kv260", model=str(qwen25_tiny), out=tmp_path / f"b{i}")
        assert r.payload and "computed" in r.payload["digests"].values()
        assert digests(tmp_path / f"b{i}") == digests(tmp_path / "a")
    entry.write_text("{")  # not JSON at all: a miss, then a good entry again
    forget_plans(tmp_path)
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "c")
    assert r.payload and r.payload["hashed"] > 0
    assert json.loads(entry.read_text()) == doc and a.payload


def test_the_summary_and_json_say_how_the_partitions_were_made(
    tmp_path, qwen25_tiny, monkeypatch, capsys, seed_content_caches
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    out = tmp_path / "a"
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["payload"]
    assert rep["copied"] + rep["shared"] == rep["bytes"] and rep["digests"]["partitions"] == "computed"
    assert "payload" not in json.loads((out / "build.json").read_text())  # never in an artifact
    board = tmp_path / "kv260.toml"  # a changed input, unchanged partitions: hard links
    from q25deploy.resources import data_dir

    board.write_text((data_dir("targets") / "kv260.toml").read_text().replace("port = 22", "port = 2200"))
    args = ["build", "--target", "kv260", "--target-file", str(board), "--model", str(qwen25_tiny), "--out", str(out)]
    assert main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("payload"))
    assert "hard-linked from the last build" in line and "digests from the last build" in line
    assert main(args) == 0
    assert "payload" not in capsys.readouterr().out  # up to date: nothing made
