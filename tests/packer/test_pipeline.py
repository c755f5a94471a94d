from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_craft import gguf, kv_str, tensor_info

from q25deploy.cli import main
from q25deploy.packer.pipeline import build
from q25deploy.resources import data_dir


def tree(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != ".q25deploy-stamp.json"
    }


@pytest.fixture(scope="module")
def built(builds):
    return builds


@pytest.mark.parametrize("target", ["kv260", "zcu104", "qemu"])
def test_build_writes_the_whole_set(built, target, qwen25_tiny):
    d = built[target]
    manifest = json.loads((d / "manifest.json").read_text())
    kinds = {a["path"]: a["kind"] for a in manifest["artifacts"]}
    assert kinds["tokenizer/tokenizer.q25tokrt"] == "tokenizer-runtime-image"
    assert kinds["partitions/region_00.bin"] == "tensor-partition"
    assert kinds["reserved-memory.dtsi"] == "reserved-memory-dtsi"
    assert {"partition_map.json", "q25_memory_map.h", "memory-map.svg", "build.json", "smoke_ids.json"} <= set(kinds)
    for a in manifest["artifacts"]:
        data = (d / a["path"]).read_bytes()
        assert len(data) == a["size"] and hashlib.sha256(data).hexdigest() == a["sha256"], a["path"]
    # every tensor in the partition files is byte-identical to the GGUF payload
    pmap = json.loads((d / "partition_map.json").read_text())
    src = qwen25_tiny.read_bytes()
    parts = {r["index"]: (d / r["file"]).read_bytes() for r in pmap["regions"]}
    for t in pmap["tensors"]:
        got = parts[t["region"]][t["offset"] : t["offset"] + t["bytes"]]
        assert got == src[t["source_offset"] : t["source_offset"] + t["bytes"]]
        assert hashlib.sha256(got).hexdigest() == t["sha256"]
        region = pmap["regions"][t["region"]]
        assert t["address"] == region["base"] + t["offset"]


def test_build_records_the_smoke_prompts_ids_of_its_image(built):
    """smoke_ids.json: the host codec's ids of every smoke prompt for the image built (what a
    deploy's smoke test compares the board with), bound to the image by its sha256."""
    from q25deploy.tokenizer.codec import Codec
    from q25deploy.tokenizer.image.reader import read_image_file
    from q25deploy.tokenizer.prompts import SMOKE_PROMPTS

    d = built["kv260"]
    kinds = {a["path"]: a for a in json.loads((d / "manifest.json").read_text())["artifacts"]}
    assert kinds["smoke_ids.json"]["kind"] == "smoke-ids"
    record = json.loads((d / "smoke_ids.json").read_text())
    image = d / "tokenizer" / "tokenizer.q25tokrt"
    assert record["image_sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    codec = Codec(read_image_file(image))
    assert [(c["text"].encode(), c["special"]) for c in record["prompts"]] == SMOKE_PROMPTS
    assert [c["ids"] for c in record["prompts"]] == [codec.encode(t, sp) for t, sp in SMOKE_PROMPTS]
    assert record["prompts"][5]["ids"][0] == 151644  # <|im_start|>: the special prompt parsed its tokens


def test_builds_are_reproducible(tmp_path, built, qwen25_tiny):
    again = tmp_path / "again"
    shutil.copy(qwen25_tiny, tmp_path / "copy.gguf")  # other path, other mtime: same content
    argv = [
        "build",
        "--target",
        "kv260",
        "--model",
        str(tmp_path / "copy.gguf"),
        "--out",
        str(again),
        "--forward",
        "all",
    ]
    assert main(argv) == 0
    a, b = tree(built["kv260"]), tree(again)
    a.pop("build.json"), b.pop("build.json")  # the one file that names the model reference given
    assert set(a) == set(b)
    for k in [k for k in a if k != "manifest.json"]:  # the manifest lists build.json's digest
        assert a[k] == b[k], k


@pytest.mark.parametrize("target", ["kv260", "qemu"])
def test_every_file_is_reproducible_across_processes_and_caches(tmp_path, qwen25_tiny, target):
    """Two builds in fresh processes with their own empty tokenizer caches and other hash
    seeds: every file, build.json and manifest.json included, is byte-identical."""
    trees = []
    for i, seed in enumerate(("1", "4242")):
        env = {**os.environ, "PYTHONHASHSEED": seed, "XDG_CACHE_HOME": str(tmp_path / f"cache{i}")}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "q25deploy",
                "build",
                "--target",
                target,
                "--model",
                str(qwen25_tiny),
                "--out",
                str(tmp_path / f"out{i}"),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        trees.append(tree(tmp_path / f"out{i}"))
        assert (tmp_path / f"cache{i}" / "q25deploy" / "tokenizer").is_dir()  # built, not taken from a cache
    assert "build.json" in trees[0] and "manifest.json" in trees[0]
    assert trees[0] == trees[1]


def test_unchanged_rebuild_does_nothing_and_changed_board_relinks(tmp_path, qwen25_tiny, capsys):
    out = tmp_path / "b"
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out)]) == 0
    inode = (out / "partitions" / "region_00.bin").stat().st_ino
    capsys.readouterr()
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("up to date")
    # a board file that changes only the ssh port: a new build, but the unchanged stages are
    # hard links to the previous files, not rewrites
    board = tmp_path / "kv260.toml"
    board.write_text((data_dir("targets") / "kv260.toml").read_text().replace("port = 22", "port = 2200"))
    assert (
        main(
            ["build", "--target", "kv260", "--target-file", str(board), "--model", str(qwen25_tiny), "--out", str(out)]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("built")
    assert (out / "partitions" / "region_00.bin").stat().st_ino == inode
    # the build directory and its layer hold the only links: the old directory is gone
    assert (out / "tokenizer" / "tokenizer.q25tokrt").stat().st_nlink == 2
    assert sorted(os.listdir(tmp_path)) == ["b", "kv260.toml"]


def test_default_model_is_the_demo_when_ollama_has_none(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert main(["build", "--target", "kv260"]) == 0
    out = capsys.readouterr().out
    assert "built-in demo model" in out and (tmp_path / "q25-build" / "kv260" / "manifest.json").is_file()


def test_default_model_prefers_ollama(tmp_path, monkeypatch, capsys, qwen25_tiny):
    from ollama_store import add_model

    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "o"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    add_model(tmp_path / "o", "qwen2.5:0.5b", qwen25_tiny)
    assert main(["build", "--target", "qemu", "--out", str(tmp_path / "q"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"]["reference"] == "qwen2.5:0.5b" and "Ollama" in summary["note"]
    assert summary["model"]["ollama"]["license"]


def _one_line(err: str) -> None:
    assert err.count("\n") == 1 and err.startswith("q25deploy: error: ") and "Traceback" not in err


def test_fit_error(tmp_path, capsys, qwen25_tiny):
    board = tmp_path / "small.toml"
    board.write_text(
        (data_dir("targets") / "zcu104.toml").read_text().replace("max_model_share = 0.5", "max_model_share = 0.001")
    )
    out = tmp_path / "out"
    assert main(["build", "--target-file", str(board), "--model", str(qwen25_tiny), "--out", str(out)]) == 10
    err = capsys.readouterr().err
    _one_line(err)
    assert "does not fit zcu104" in err and "needs" in err and "allows" in err
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["small.toml"]


def test_unknown_target_and_bad_board_file(tmp_path, capsys):
    assert main(["build", "--target", "zynq7000"]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "unknown target 'zynq7000'" in err and "kv260" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("[board]\nname = 'x'\n")
    assert main(["build", "--target-file", str(bad)]) == 11
    _one_line(capsys.readouterr().err)


def _hostile(tmp_path, qwen25_tiny):
    data = qwen25_tiny.read_bytes()
    with_bad_name = gguf(
        [kv_str("general.architecture", "qwen2")], [tensor_info("../../etc/passwd", (8,), 0, 0)], bytes(32)
    )
    return {
        "truncated-header": data[:3000],
        "truncated-metadata": data[: len(data) // 2],
        "truncated-data": data[:-1000],
        "absurd-count": data[:8] + (1 << 60).to_bytes(8, "little") + data[16:],
        "unknown-type": gguf([kv_str("general.architecture", "qwen2")], [tensor_info("w", (8,), 99, 0)], bytes(64)),
        "out-of-range": gguf(
            [kv_str("general.architecture", "qwen2")], [tensor_info("w", (8,), 0, 1 << 40)], bytes(64)
        ),
        "path-traversal": with_bad_name,
    }


@pytest.mark.parametrize(
    "case",
    [
        "truncated-header",
        "truncated-metadata",
        "truncated-data",
        "absurd-count",
        "unknown-type",
        "out-of-range",
        "path-traversal",
    ],
)
def test_hostile_models_leave_no_output(tmp_path, capsys, qwen25_tiny, case):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(_hostile(tmp_path, qwen25_tiny)[case])
    for argv in (
        ["build", "--target", "kv260", "--model", str(bad), "--out", str(tmp_path / "out")],
        ["export", "tensors", str(bad), "--out", str(tmp_path / "out")],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 4, err
        _one_line(err)
        assert sorted(os.listdir(tmp_path)) == ["bad.gguf"]


def test_failed_build_keeps_the_previous_one(tmp_path, capsys, built, qwen25_tiny):
    out = tmp_path / "out"
    shutil.copytree(built["kv260"], out)
    before = tree(out)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(qwen25_tiny.read_bytes()[:-1000])
    assert main(["build", "--target", "kv260", "--model", str(bad), "--out", str(out)]) == 4
    assert tree(out) == before and sorted(os.listdir(tmp_path)) == ["bad.gguf", "out"]


def test_build_json_summary(tmp_path, capsys, qwen25_tiny):
    r = build("zcu104", model=str(qwen25_tiny), out=tmp_path / "z")
    assert not r.up_to_date and r.summary["memory"]["regions"][0]["bank"] == "ddr-low"
    assert r.summary["image"]["install_dir"] == "/lib/firmware/q25"


def test_tokenizer_assets_come_from_the_content_cache(tmp_path, qwen25_tiny, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(a)]) == 0
    entries = list((tmp_path / "cache" / "q25deploy" / "tokenizer").iterdir())
    assert len(entries) == 1
    assert main(["build", "--target", "zcu104", "--model", str(qwen25_tiny), "--out", str(b)]) == 0
    for p in (a / "tokenizer").iterdir():
        assert (b / "tokenizer" / p.name).read_bytes() == p.read_bytes()
        assert (b / "tokenizer" / p.name).stat().st_ino != p.stat().st_ino  # copies, not links
    (entries[0] / "tokenizer.q25tokrt").unlink()  # a damaged entry is rebuilt, never used
    shutil.rmtree(b)
    shutil.rmtree(tmp_path / "cache" / "q25deploy" / "plans")  # a build that runs every stage
    assert main(["build", "--target", "zcu104", "--model", str(qwen25_tiny), "--out", str(b)]) == 0
    assert (b / "tokenizer" / "tokenizer.q25tokrt").read_bytes() == (
        a / "tokenizer" / "tokenizer.q25tokrt"
    ).read_bytes()


def test_a_flipped_byte_in_the_tokenizer_cache_is_never_handed_out(tmp_path, qwen25_tiny, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(a)]) == 0
    entry = next((tmp_path / "cache" / "q25deploy" / "tokenizer").iterdir())
    image = entry / "tokenizer.q25tokrt"
    data = bytearray(image.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit off: only the digest can tell
    image.write_bytes(bytes(data))
    assert main(["build", "--target", "zcu104", "--model", str(qwen25_tiny), "--out", str(b)]) == 0
    assert (b / "tokenizer" / "tokenizer.q25tokrt").read_bytes() == (
        a / "tokenizer" / "tokenizer.q25tokrt"
    ).read_bytes()
    index = json.loads((entry / "assets.json").read_text())  # rebuilt and stored again, with digests
    assert all(len(x["sha256"]) == 64 for x in index) and image.read_bytes() != bytes(data)


def test_a_tampered_previous_build_is_never_followed_out_of_its_directory(tmp_path, qwen25_tiny):
    """The last build in DIR is input: a manifest naming paths outside DIR, or a partition
    swapped for a symlink to another file, must not be linked, followed or trusted."""
    out = tmp_path / "b"
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out)]) == 0
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    manifest = json.loads((out / "manifest.json").read_text())
    part = next(a for a in manifest["artifacts"] if a["path"].startswith("partitions/"))
    (out / part["path"]).unlink()
    (out / part["path"]).symlink_to(secret)  # looks like the partition, is something else
    manifest["artifacts"].append({"path": "tokenizer/../../secret.txt", "kind": "x", "size": 9, "sha256": "0" * 64})
    (out / "manifest.json").write_text(json.dumps(manifest))
    board = tmp_path / "kv260-port.toml"  # a changed input: a rebuild that reuses what it may
    board.write_text((data_dir("targets") / "kv260.toml").read_text().replace("port = 22", "port = 2222"))
    assert (
        main(
            ["build", "--target", "kv260", "--target-file", str(board), "--model", str(qwen25_tiny), "--out", str(out)]
        )
        == 0
    )
    assert secret.read_text() == "not yours" and secret.stat().st_nlink == 1
    assert not (out / part["path"]).is_symlink()
    new = json.loads((out / "manifest.json").read_text())
    assert all(".." not in a["path"] for a in new["artifacts"])
    for a in new["artifacts"]:
        assert hashlib.sha256((out / a["path"]).read_bytes()).hexdigest() == a["sha256"], a["path"]
