"""The unchanged rebuild's quick check: up to date without loading the plugins (or numpy,
gguf, SSH), and not up to date when anything the last build read changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from q25deploy.packer import quick
from q25deploy.packer.pipeline import build
from q25deploy.resources import data_dir

_LOADED = (
    "import sys\n"
    "from q25deploy.cli.app import main\n"
    "rc = main(sys.argv[1:])\n"
    "heavy = ('pluggy', 'importlib.metadata', 'numpy', 'gguf', 'paramiko', 'fabric', 'cryptography')\n"
    "print(rc, sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
)


def run(tmp_path, *args: str) -> tuple[str, dict]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", _LOADED, *args], env=env, capture_output=True, text=True, cwd=tmp_path)
    return r.stderr.strip().splitlines()[-1], json.loads(r.stdout)


def test_an_unchanged_rebuild_loads_no_plugin(tmp_path, qwen25_tiny):
    args = ["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", "b", "--json"]
    loaded, doc = run(tmp_path, *args)
    assert loaded.startswith("0 ") and "pluggy" in loaded and doc["up_to_date"] is False
    loaded, doc = run(tmp_path, *args)  # the full check wrote the quick record of this command line
    assert loaded == "0 []" and doc["up_to_date"] is True
    assert doc["model"]["sha256"] == json.loads((tmp_path / "b" / "build.json").read_text())["model"]["sha256"]


def test_anything_the_last_build_read_that_changed_is_seen(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    board = tmp_path / "board.toml"
    board.write_text((data_dir("targets") / "kv260.toml").read_text())
    model = tmp_path / "m.gguf"
    model.write_bytes(qwen25_tiny.read_bytes())
    out = tmp_path / "b"

    def again(**kw) -> bool:
        return build("kv260", model=str(model), out=out, target_file=str(board), **kw).up_to_date

    assert not again() and again()
    stamp = json.loads((out / ".q25deploy-stamp.json").read_text())
    asked = {
        "target": "kv260",
        "target_file": str(board),
        "model": str(model),
        "model_license": None,
        "model_license_file": None,
        "layer": [0, None],
        "reserve": None,
        "forward": 1,
    }
    assert quick.unchanged(stamp, quick.request(asked, model)) == []
    board.write_text(board.read_text().replace("port = 22", "port = 2200"))  # the board file's bytes
    assert quick.unchanged(stamp, quick.request(asked, model)) is None
    assert not again() and again()
    assert not again(layer_release=3) and again(layer_release=3)  # an option
    os.utime(model, ns=(1, 1))  # the model's time: the full check decides (same bytes, a rebuild)
    assert quick.unchanged(json.loads((out / ".q25deploy-stamp.json").read_text()), quick.request(asked, model)) is None
    assert not again(layer_release=3)
    (out / "partition_map.json").unlink()  # an output gone
    assert not again(layer_release=3)


def test_a_damaged_quick_record_is_no_stamp(tmp_path, qwen25_tiny, monkeypatch, seed_content_caches):
    """The stamp is read through its schema (issue 44, item 5): a damaged quick record makes
    it no stamp, so the build is made again (never a traceback), and the next is up to date."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    out = tmp_path / "b"
    assert not build("kv260", model=str(qwen25_tiny), out=out).up_to_date
    path = out / ".q25deploy-stamp.json"
    stamp = json.loads(path.read_text())
    damages = (None, "x", {"watch": 1}, {"watch": [1], "snapshot": {}}, {"snapshot": {"board": []}})
    damages += ({**stamp["quick"], "failures": [5]},)  # a failure that is not [plugin, error]
    for damage in damages:
        path.write_text(json.dumps({**stamp, "quick": damage}))
        assert not build("kv260", model=str(qwen25_tiny), out=out).up_to_date, damage
        assert build("kv260", model=str(qwen25_tiny), out=out).up_to_date
