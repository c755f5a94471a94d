"""The build directory is input, every byte (issue 44, item 5): the incremental-build stamp
(``.q25deploy-stamp.json``, q25deploy/packer/pipeline.py) is read through its schema and
written through a new file no one could plant, and nothing from it becomes a path.

Each case is the reproduction: a build made by the program, DIR then changed as another user
who can write it would change it, and the rebuild run as the user runs it; what is checked is
every file outside DIR that the rebuild could have written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from q25deploy.cli import main

STAMP = ".q25deploy-stamp.json"


def _build(model: Path, out: Path) -> int:
    return main(["build", "--target", "kv260", "--model", str(model), "--out", str(out), "--quiet"])


def _stamp(out: Path) -> dict:
    return json.loads((out / STAMP).read_text())


@pytest.fixture
def built(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    out = tmp_path / "out"
    assert _build(qwen25_tiny, out) == 0
    return out


def test_a_link_at_the_stamps_temporary_name_is_never_written_through(tmp_path, qwen25_tiny, built, capsys):
    """The stamp was written through ``.q25deploy-stamp.json.<PID>.tmp`` with ``write_bytes``:
    a link planted there made an unchanged rebuild overwrite the file it named, outside DIR."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    stamp = _stamp(built)
    del stamp["quick"]  # DIR's other writer: the rebuild writes the stamp again (its quick record)
    (built / STAMP).write_text(json.dumps(stamp))
    planted = [built / f"{STAMP}.{os.getpid()}.tmp", built / f".{STAMP}.tmp"]
    for link in planted:
        link.symlink_to(victim)
    capsys.readouterr()
    assert _build(qwen25_tiny, built) == 0
    assert capsys.readouterr().out.startswith("up to date")
    assert victim.read_text() == "the user's own file\n"  # nothing written through a link
    assert all(link.is_symlink() and link.resolve() == victim for link in planted)  # nor the links moved
    assert not (built / STAMP).is_symlink() and "quick" in _stamp(built)  # the stamp: a file of its own


@pytest.mark.parametrize("digest", ["abs", "../x", "0" * 64])
def test_a_stamps_model_digest_is_never_a_path_nor_trusted(tmp_path, qwen25_tiny, built, monkeypatch, digest):
    """The stamp's ``model_sha256`` was read without the schema and became a cache path
    (``payload/{sha}.json``): an absolute value overwrote a .json of the user's, then exit
    70; ``../x`` wrote beside the cache's folders. Now a malformed stamp is no stamp (a full
    build, exit 0), and a well-formed digest from DIR is not taken for the model's either."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache2"))  # a cache that does not know the model
    mine = tmp_path / "mine.json"  # what payload/{sha}.json named for sha = str(tmp_path / "mine")
    mine.write_text('{"the user": "own json"}\n')
    value = str(tmp_path / "mine") if digest == "abs" else digest
    stamp = _stamp(built)
    stamp["model_sha256"] = value
    stamp["inputs"]["tool"] = "0.0.0"  # not up to date, but the model as the stamp records it
    stamp.pop("quick")
    (built / STAMP).write_text(json.dumps(stamp))
    before = sorted(p for p in tmp_path.rglob("*") if not p.is_relative_to(built))
    assert _build(qwen25_tiny, built) == 0
    assert mine.read_text() == '{"the user": "own json"}\n'
    assert not (tmp_path / "cache2" / "q25deploy" / "x.json").exists()
    cache = tmp_path / "cache2"
    new = [p for p in tmp_path.rglob("*") if not p.is_relative_to(built) and p not in before]
    assert all(p.is_relative_to(cache) for p in new), new  # DIR and the cache, nothing else
    assert not any(value in str(p) for p in cache.rglob("*"))  # the stamp's value named no cache file
    real = hashlib.sha256(qwen25_tiny.read_bytes()).hexdigest()
    assert json.loads((built / "build.json").read_text())["model"]["sha256"] == real
    assert _stamp(built)["model_sha256"] == real
