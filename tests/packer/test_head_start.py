"""A served build's copy started before the checks (q25deploy/packer/head_start.py): adopted
only when the build's own checks find the entry it copies, byte for byte the cold build;
stopped and removed otherwise; never started where it could write what the build would not."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from q25deploy.packer import head_start, plan_cache, quick
from q25deploy.packer.pipeline import build, request


def _files(d: Path) -> dict[str, str]:
    """Every file's sha256 (the stamp without its quick record: it names the process's sys.path)."""
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == ".q25deploy-stamp.json":
                stamp = json.loads(data)
                stamp.pop("quick", None)
                data = json.dumps(stamp, sort_keys=True).encode()
            out[str(p.relative_to(d))] = hashlib.sha256(data).hexdigest()
    return out


def _verified(d: Path) -> None:
    """Every artifact is the bytes its manifest names."""
    for a in json.loads((d / "manifest.json").read_text())["artifacts"]:
        assert hashlib.sha256((d / a["path"]).read_bytes()).hexdigest() == a["sha256"], a["path"]


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".tmp-" in p.name)


@pytest.fixture
def cold(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches) -> Path:
    """A cold build (but for the content caches), which left the plan-cache entry and the
    request record of this process."""
    seed_content_caches(tmp_path / "cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build("kv260", model=str(qwen25_tiny), out=tmp_path / "cold")
    return tmp_path / "cold"


def _asked(model: Path, target: str = "kv260") -> dict:
    return request(target, model=str(model))


@pytest.mark.parametrize("threads", [False, True], ids=["fork", "thread"])
def test_the_build_adopts_the_copy_of_its_own_entry(tmp_path, qwen25_tiny, cold, monkeypatch, threads):
    if threads:  # a process that runs threads already copies in a thread, not a child
        monkeypatch.setattr(threading, "active_count", lambda: 2)
    elif threading.active_count() > 1:
        pytest.skip("this test process runs threads: the CLI test covers the child")
    hs = head_start.start(_asked(qwen25_tiny), tmp_path / "warm")
    assert hs is not None and (hs.copy.pid != 0) is not threads
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "warm", head_start=hs)
    assert r.payload and r.payload.get("head_start") and r.payload["copied"] == r.payload["bytes"] > 0
    assert _files(tmp_path / "warm") == _files(cold) and not _leftovers(tmp_path)


def test_a_copy_of_another_entry_is_stopped_and_removed(tmp_path, qwen25_tiny, cold):
    build("zcu104", model=str(qwen25_tiny), out=tmp_path / "zcu104")  # its entry and record
    hs = head_start.start(_asked(qwen25_tiny, "zcu104"), tmp_path / "warm")
    assert hs is not None
    # the command line named zcu104, the build resolved kv260 (say, a plugin's board file)
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "warm", head_start=hs)
    assert r.payload and not r.payload.get("head_start")
    assert hs.copy.pid == 0 and not os.path.exists(hs.o.tmp)  # waited for, then removed
    assert _files(tmp_path / "warm") == _files(cold) and not _leftovers(tmp_path)


def test_a_copy_into_another_directory_is_not_taken(tmp_path, qwen25_tiny, cold):
    hs = head_start.start(_asked(qwen25_tiny), tmp_path / "warm")
    assert hs is not None
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "other", head_start=hs)
    assert r.payload and not r.payload.get("head_start") and not (tmp_path / "warm").exists()
    _verified(tmp_path / "other")
    assert not _leftovers(tmp_path)


def test_a_head_start_the_command_never_reaches_leaves_nothing(tmp_path, qwen25_tiny, cold):
    hs = head_start.start(_asked(qwen25_tiny), tmp_path / "warm")
    assert hs is not None and _leftovers(tmp_path)
    hs.discard()  # what cli.main does when the command fails before the build takes it
    hs.discard()
    assert not _leftovers(tmp_path) and not (tmp_path / "warm").exists() and hs.copy.pid == 0


def test_a_damaged_blob_found_after_the_head_start_builds_in_full(tmp_path, qwen25_tiny, cold):
    hs = head_start.start(_asked(qwen25_tiny), tmp_path / "warm")
    assert hs is not None
    blob = next(
        hs.entry.blob_dir / hs.entry.artifacts[rel].sha256 for rel in hs.entry.origins() if rel.endswith(".q25tokrt")
    )
    blob.write_bytes(b"not the image")  # checked when served, after the copy started
    r = build("kv260", model=str(qwen25_tiny), out=tmp_path / "warm", head_start=hs)
    assert r.payload and not r.payload.get("head_start") and r.payload["digests"]["tensors"] != "plan cache"
    assert _files(tmp_path / "warm") == _files(cold) and not _leftovers(tmp_path)


def test_no_head_start_where_it_would_write_what_the_build_would_not(tmp_path, qwen25_tiny, cold):
    asked = _asked(qwen25_tiny)
    (tmp_path / "existing").mkdir()  # an existing build lends its partitions by hard links
    assert head_start.start(asked, tmp_path / "existing") is None
    assert head_start.start(asked, tmp_path / "no" / "such" / "folder") is None
    assert not (tmp_path / "no").exists()
    assert head_start.start({**asked, "target": "zcu104"}, tmp_path / "w") is None  # never built
    assert head_start.start({**asked, "layer": [1, None]}, tmp_path / "w") is None
    assert not _leftovers(tmp_path)


def test_a_stale_or_damaged_request_record_starts_nothing(tmp_path, qwen25_tiny, cold):
    asked = _asked(qwen25_tiny)
    (record,) = (tmp_path / "cache" / "q25deploy" / "plans" / "requests").iterdir()
    st = os.stat(qwen25_tiny)
    os.utime(qwen25_tiny, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # what the build read changed
    try:
        assert head_start.start(asked, tmp_path / "w") is None
    finally:
        os.utime(qwen25_tiny, ns=(st.st_atime_ns, st.st_mtime_ns))
    hs = head_start.start(asked, tmp_path / "w")  # as recorded
    assert hs is not None
    hs.discard()
    good = record.read_bytes()
    doc = json.loads(good)
    for bad in (b"{", json.dumps({**doc, "key": "../../x"}).encode(), json.dumps({**doc, "quick": []}).encode()):
        record.write_bytes(bad)
        assert plan_cache.recall(quick.request(asked, qwen25_tiny)) is None
    record.write_bytes(json.dumps({**doc, "key": "0" * 64}).encode())  # an entry that is not there
    assert head_start.start(asked, tmp_path / "w2") is None
    assert not _leftovers(tmp_path)


def test_the_command_line_starts_the_copy_before_its_imports(tmp_path, qwen25_tiny, cold):
    """The program as a user runs it: the request its early reading forms is the one the build
    records (or it would never start), and the copy starts before the plugins load."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "Q25_PHASE_TIMES": str(tmp_path / "ph.json")}
    cmd = [sys.executable, "-m", "q25deploy", "build", "--target", "kv260", "--model", str(qwen25_tiny), "--json"]
    reports = []
    for out in ("w1", "w2"):  # the first records this interpreter's request, the second uses it
        r = subprocess.run([*cmd, "--out", str(tmp_path / out)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        reports.append(json.loads(r.stdout)["payload"])
    assert not reports[0].get("head_start") and reports[1].get("head_start")
    phases = json.loads((tmp_path / "ph.json").read_text())
    assert phases["head start"] < phases["imports"] < phases["payload"]
    assert _files(tmp_path / "w2") == _files(cold) and not _leftovers(tmp_path)
