"""The smoke prompts' ids cached by image: a build of an image built before does not start the
codec; a record for another image, other prompts or a damaged one is a miss."""

from __future__ import annotations

import json
import shutil

from q25deploy.packer.pipeline import build
from q25deploy.tokenizer import cache


def test_a_known_image_s_smoke_ids_come_from_the_cache(tmp_path, qwen25_tiny, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build("kv260", model=str(qwen25_tiny), out=tmp_path / "a")
    want = (tmp_path / "a" / "smoke_ids.json").read_bytes()

    def no_codec(*a, **k):
        raise AssertionError("the codec ran for a known image")

    shutil.rmtree(tmp_path / "cache" / "q25deploy" / "plans")  # a build that runs every stage
    with monkeypatch.context() as m:
        m.setattr("q25deploy.tokenizer.codec.Codec", no_codec)
        build("kv260", model=str(qwen25_tiny), out=tmp_path / "b")
    assert (tmp_path / "b" / "smoke_ids.json").read_bytes() == want


def test_a_record_for_something_else_is_a_miss(tmp_path, qwen25_tiny, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build("kv260", model=str(qwen25_tiny), out=tmp_path / "a")
    (entry,) = (tmp_path / "cache" / "q25deploy" / "smoke").iterdir()
    good = json.loads(entry.read_text())
    image_sha = good["image_sha256"]
    assert cache.smoke_lookup(image_sha, entry.stem) == [p["ids"] for p in good["prompts"]]
    for damage in (
        lambda d: d.__setitem__("image_sha256", "0" * 64),  # another image's ids
        lambda d: d["prompts"].pop(),  # other prompts
        lambda d: d["prompts"][0].__setitem__("ids", "not ids"),
    ):
        doc = json.loads(json.dumps(good))
        damage(doc)
        entry.write_text(json.dumps(doc))
        assert cache.smoke_lookup(image_sha, entry.stem) is None
    shutil.rmtree(tmp_path / "cache" / "q25deploy" / "plans")  # a build that runs every stage
    build("kv260", model=str(qwen25_tiny), out=tmp_path / "b")  # computed again, stored again
    assert (tmp_path / "b" / "smoke_ids.json").read_bytes() == (tmp_path / "a" / "smoke_ids.json").read_bytes()
    assert json.loads(entry.read_text()) == good
