"""The plan cache: a build made before (same model, board file, options and q25deploy) is
served from it, byte for byte the cold build, without numpy or gguf; another board file or
model is not served, and a damaged or hostile entry is a miss, never a wrong build."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from q25deploy.packer.pipeline import build
from q25deploy.resources import data_dir


def tree(d: Path) -> dict[str, tuple[str, int]]:
    """Every file → (sha256, link count): the bytes and the hard links; the stamp too, but for
    its quick record (the command line's ``sys.path``: a test's process is not a user's)."""
    return {str(p.relative_to(d)): (hashlib.sha256(_bytes(p)).hexdigest(), p.stat().st_nlink) for p in _files(d)}


def _files(d: Path) -> list[Path]:
    return [p for p in sorted(d.rglob("*")) if p.is_file()]


def _bytes(p: Path) -> bytes:
    if p.name != ".q25deploy-stamp.json":
        return p.read_bytes()
    stamp = json.loads(p.read_text())
    stamp.pop("quick", None)
    return json.dumps(stamp, sort_keys=True).encode()


def plans(tmp_path) -> Path:
    return tmp_path / "cache" / "q25deploy" / "plans"


@pytest.fixture
def cold(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches):
    """A cold build (the plan, payload and digest caches empty) into ``cold``, which wrote the
    plan-cache entry."""
    seed_content_caches(tmp_path / "cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "cold")
    assert r.payload and r.payload["digests"]["tensors"] == "computed"
    (entry,) = (plans(tmp_path) / "entries").iterdir()
    return entry


def served(r) -> bool:
    return bool(r.payload) and r.payload["digests"] == {"tensors": "plan cache", "partitions": "plan cache"}


def test_a_served_build_is_the_cold_build_byte_for_byte_without_numpy(tmp_path, qwen25_tiny, cold):
    code = (
        "import sys\n"
        "from q25deploy.cli.app import main\n"
        f"rc = main(['build', '--target', 'kv260', '--model', {str(qwen25_tiny)!r}, '--out', sys.argv[1], '--json'])\n"
        "heavy = sorted(m for m in ('numpy', 'gguf', 'paramiko', 'fabric', 'cryptography') if m in sys.modules)\n"
        "print(rc, heavy, file=sys.stderr)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "warm")], env=env, capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "0 []", r.stderr
    rep = json.loads(r.stdout)["payload"]
    assert rep["digests"] == {"tensors": "plan cache", "partitions": "plan cache"} and rep["hashed"] == 0
    assert rep["copied"] + rep["shared"] == rep["bytes"] > 0
    # every file, build.json, manifest.json and the stamp included, and the same hard links
    assert tree(tmp_path / "warm") == tree(tmp_path / "cold")
    # the served build is a build like any other: an unchanged rebuild of it does nothing
    again = build("kv260", model=str(qwen25_tiny), out=tmp_path / "warm")
    assert again.up_to_date


def test_a_changed_board_file_or_model_is_not_served(tmp_path, qwen25_tiny, cold):
    board = tmp_path / "kv260.toml"
    board.write_text((data_dir("targets") / "kv260.toml").read_text().replace("port = 22", "port = 2200"))
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "board", target_file=str(board))
    assert r.payload and not served(r)
    model = tmp_path / "m.gguf"  # the same path, other bytes: another model
    data = bytearray(qwen25_tiny.read_bytes())
    model.write_bytes(data)
    assert not served(build("kv260", model=str(model), out=tmp_path / "m1"))  # another reference
    assert served(build("kv260", model=str(model), out=tmp_path / "m2"))
    data[-1] ^= 0xFF  # the last tensor's last byte
    model.write_bytes(data)
    os.utime(model, ns=(1, 1))
    r = build("kv260", model=str(model), out=tmp_path / "m3")
    assert r.payload and not served(r) and r.payload["digests"]["tensors"] == "computed"
    assert (tmp_path / "m3" / "partition_map.json").read_bytes() != (
        tmp_path / "m1" / "partition_map.json"
    ).read_bytes()


def _blob(tmp_path, entry: Path, rel: str) -> Path:
    sha = next(a["sha256"] for a in json.loads(entry.read_text())["artifacts"] if a["path"] == rel)
    return plans(tmp_path) / "blobs" / sha


def _rewrite_pmap(tmp_path, entry: Path, change) -> None:
    """A hostile entry that is consistent with itself: a changed partition map stored as a blob
    under its own digest, and the entry naming it."""
    doc = json.loads(entry.read_text())
    old = _blob(tmp_path, entry, "partition_map.json")
    pmap = json.loads(old.read_text())
    change(pmap)
    data = json.dumps(pmap).encode()
    for row in doc["artifacts"]:  # partition_map.json and the layer's link to it
        if row["sha256"] == old.name:
            row["sha256"], row["size"] = hashlib.sha256(data).hexdigest(), len(data)
    (plans(tmp_path) / "blobs" / hashlib.sha256(data).hexdigest()).write_bytes(data)
    entry.write_text(json.dumps(doc))


def _flip_blob(tmp_path, entry: Path) -> None:
    blob = _blob(tmp_path, entry, "tokenizer/tokens.jsonl")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit off: only the digest can tell
    blob.write_bytes(bytes(data))


def _edit(change):
    def damage(tmp_path, entry: Path) -> None:
        doc = json.loads(entry.read_text())
        change(doc)
        entry.write_text(json.dumps(doc))

    return damage


def _first_tensor(pmap: dict) -> dict:
    return pmap["tensors"][0]


@pytest.mark.parametrize(
    "damage",
    [
        _flip_blob,
        lambda tmp_path, entry: entry.write_text("{"),
        _edit(lambda d: d.update(format="q25deploy-plan-cache/0")),
        _edit(lambda d: d["artifacts"][0].update(path="../../escape")),
        _edit(lambda d: d["links"].append(["build.json", "manifest-of-nothing"])),
        _edit(lambda d: d.update(model_sha256="0" * 64)),
        _edit(lambda d: next(a for a in d["artifacts"] if a["kind"] == "tensor-partition").update(sha256="1" * 64)),
        lambda tmp_path, entry: _rewrite_pmap(
            tmp_path, entry, lambda m: _first_tensor(m).update(source_offset=1 << 40)
        ),
        lambda tmp_path, entry: _rewrite_pmap(tmp_path, entry, lambda m: _first_tensor(m).update(region=7)),
        lambda tmp_path, entry: _rewrite_pmap(tmp_path, entry, lambda m: m["regions"][0].update(used=1)),
    ],
    ids=[
        "flipped-blob",
        "not-json",
        "format",
        "path-escape",
        "link-to-nothing",
        "other-model",
        "partition-digest",
        "tensor-past-the-model",
        "tensor-in-no-region",
        "region-size",
    ],
)
def test_a_damaged_or_hostile_entry_is_rebuilt_never_trusted(tmp_path, qwen25_tiny, cold, damage):
    damage(tmp_path, cold)
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "again")
    assert r.payload and not served(r)
    assert tree(tmp_path / "again") == tree(tmp_path / "cold")
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
    # the full build wrote a sound entry again: the next build is served, and the same
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "third")
    assert served(r)
    assert tree(tmp_path / "third") == tree(tmp_path / "cold")
