"""The one writer of a file in place (q25deploy/common.py's ``atomic_file``) and the one rule for
a digest that becomes a path part (``is_sha256``), with every cache that names files by a
digest held to it (issue 44, item 5): real files, links planted where another user could."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from q25deploy import common
from q25deploy.model import source
from q25deploy.packer import digest_cache, forward_record, plan_cache
from q25deploy.tokenizer import cache as tokenizer_cache

HOSTILE = ["/abs/x", "../x", "x/../../y", "A" * 64, "0" * 63, "0" * 65, "", None, 64]


def test_a_link_at_the_temporary_name_it_picks_is_skipped_never_written_through(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    victim.chmod(0o600)
    folder = tmp_path / "shared"
    folder.mkdir()
    names = iter([folder / ".f.planted.tmp", folder / ".f.free.tmp"])
    (folder / ".f.planted.tmp").symlink_to(victim)  # what another user left at the first name
    monkeypatch.setattr(common, "_temporary_name", lambda path: next(names))
    common.write_atomic(folder / "f", b"new bytes")
    assert victim.read_text() == "mine" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert (folder / ".f.planted.tmp").is_symlink()  # left as it was: not ours to remove
    assert (folder / "f").read_bytes() == b"new bytes" and stat.S_IMODE((folder / "f").stat().st_mode) == 0o644
    assert sorted(p.name for p in folder.iterdir()) == [".f.planted.tmp", "f"]


def test_a_link_at_the_name_itself_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "f").symlink_to(victim)
    common.write_atomic(tmp_path / "f", b"new", sync=False)
    assert victim.read_text() == "mine" and not (tmp_path / "f").is_symlink()
    assert (tmp_path / "f").read_bytes() == b"new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "f").write_bytes(b"old")
    with pytest.raises(RuntimeError), common.atomic_file(tmp_path / "f") as f:
        f.write(b"half")
        raise RuntimeError("disk full")
    assert os.listdir(tmp_path) == ["f"] and (tmp_path / "f").read_bytes() == b"old"


@pytest.mark.parametrize("v", HOSTILE)
def test_is_sha256_takes_only_64_lower_case_hex_digits(v):
    assert not common.is_sha256(v) and common.is_sha256("0123456789abcdef" * 4)


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.mark.parametrize("digest", HOSTILE[:5])
def test_no_cache_makes_a_path_of_what_is_not_a_sha256(tmp_path, digest):
    """Every cache that names a file by a digest or a content key (payload digests, plan
    entries, tokenizer assets and smoke ids, forward records): a value that is not 64
    lower-case hex digits is a miss and writes nothing, inside the cache or outside it."""
    cache = tmp_path / "a" / "b" / "cache"
    cache.mkdir(parents=True)
    good = "0" * 64
    digest_cache.store(digest, {"t": good}, good, [good], cache_dir=cache)
    assert digest_cache.lookup(digest, {"t"}, good, 1, cache_dir=cache) == (None, None)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"artifacts": []}))
    plan_cache.store(good, digest, out, cache_dir=cache)
    plan_cache.store(digest, good, out, cache_dir=cache)
    assert plan_cache.lookup(digest, good, 1, cache_dir=cache) is None
    assert plan_cache.lookup(good, digest, 1, cache_dir=cache) is None
    tokenizer_cache.store(digest, [], cache_dir=cache)
    assert tokenizer_cache.lookup(digest, cache_dir=cache) is None
    tokenizer_cache.smoke_store({"image_sha256": good}, digest, cache_dir=cache)
    assert tokenizer_cache.smoke_lookup(good, digest, cache_dir=cache) is None
    forward_record.store(digest, b"{}", cache_dir=cache)
    assert forward_record.lookup(digest, good, cache_dir=cache) is None
    assert _files(tmp_path) == ["a", "a/b", "a/b/cache", "out", "out/manifest.json"]


def test_a_verified_digest_that_is_not_a_sha256_is_no_entry(tmp_path, qwen25_tiny):
    """``verified.json`` (the stat-keyed digest cache) feeds the model's digest, which names
    the cache files above: a value there that is not a sha256 is not handed out."""
    cache = tmp_path / "cache"
    source.remember_digest(qwen25_tiny, "../../x", cache_dir=cache)
    assert source.cached_digest(qwen25_tiny, cache_dir=cache) is None
    real = source.file_sha256(qwen25_tiny, cache_dir=cache)  # hashed: the entry is replaced
    assert common.is_sha256(real) and source.cached_digest(qwen25_tiny, cache_dir=cache) == real
