"""--out never destroys what q25deploy did not write, and replacing an output never leaves it
missing; temporaries of killed runs do not pile up or get in the way."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from q25deploy.cli import main
from q25deploy.packer import replace
from q25deploy.packer.outputs import OutputDir


def _foreign(tmp_path):
    d = tmp_path / "mydocs"
    (d / "sub").mkdir(parents=True)
    (d / "thesis.tex").write_text("years of work")
    (d / "sub" / "notes.txt").write_text("more")
    return d


def _snapshot(d):
    return sorted((p.relative_to(d).as_posix(), p.read_bytes()) for p in d.rglob("*") if p.is_file())


@pytest.mark.parametrize("command", ["build", "export-tokenizer", "export-tensors"])
def test_out_onto_a_foreign_directory_is_refused_with_its_files_intact(tmp_path, capsys, qwen25_tiny, command):
    d = _foreign(tmp_path)
    before = _snapshot(d)
    argv = {
        "build": ["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(d)],
        "export-tokenizer": ["export", "tokenizer", str(qwen25_tiny), "--out", str(d)],
        "export-tensors": ["export", "tensors", str(qwen25_tiny), "--out", str(d)],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "did not write" in err and "refusing" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(d) == before
    assert [p.name for p in tmp_path.iterdir()] == ["mydocs"]  # no temporaries left beside it


def test_an_output_of_another_kind_is_not_replaced(tmp_path, capsys, qwen25_tiny):
    d = tmp_path / "tok"
    assert main(["export", "tokenizer", str(qwen25_tiny), "--out", str(d)]) == 0
    assert json.loads((d / "manifest.json").read_text())["output"] == "tokenizer"
    before = _snapshot(d)
    capsys.readouterr()
    assert main(["build", "--target", "qemu", "--model", str(qwen25_tiny), "--out", str(d)]) == 2
    assert "q25deploy tokenizer output" in capsys.readouterr().err
    assert _snapshot(d) == before
    assert main(["export", "tokenizer", str(qwen25_tiny), "--out", str(d)]) == 0  # the same kind: replaced


def test_a_file_added_to_an_output_stops_its_replacement(tmp_path, capsys, qwen25_tiny):
    d = tmp_path / "tok"
    assert main(["export", "tokenizer", str(qwen25_tiny), "--out", str(d)]) == 0
    (d / "my-notes.md").write_text("mine")
    capsys.readouterr()
    assert main(["export", "tokenizer", str(qwen25_tiny), "--out", str(d), "--alignment", "64"]) == 2
    assert "my-notes.md" in capsys.readouterr().err
    assert (d / "my-notes.md").read_text() == "mine"


def test_out_dot_is_refused_cleanly(tmp_path, capsys, qwen25_tiny, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for out in (".", str(tmp_path)):
        assert main(["export", "tokenizer", str(qwen25_tiny), "--out", out]) == 2
        assert "directory you are in" in capsys.readouterr().err
    assert list(work.iterdir()) == []


def test_an_empty_directory_and_a_legacy_output_are_replaced(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with OutputDir(empty, "tensors") as o:
        o.write("a.bin", b"a", "x")
    legacy = tmp_path / "legacy"  # a 0.1.0 build: no "output" in its manifest
    legacy.mkdir()
    (legacy / "build.json").write_text("{}")
    (legacy / "manifest.json").write_text(
        json.dumps(
            {
                "format": "q25deploy-manifest/1",
                "artifacts": [{"path": "build.json", "kind": "build-info", "size": 2, "sha256": "0" * 64}],
            }
        )
    )
    with OutputDir(legacy, "build") as o:
        o.write("build.json", b"{}\n", "build-info")
    assert json.loads((legacy / "manifest.json").read_text())["output"] == "build"


def test_stale_temporaries_of_killed_runs_are_removed(tmp_path):
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    dest = tmp_path / "out"
    stale = [tmp_path / f".out.tmp-{dead}-abc", tmp_path / f".out.old-{dead}-def", tmp_path / f".out.old-{dead}"]
    for s in stale:
        (s / "x").mkdir(parents=True)
    mine = tmp_path / f".out.tmp-{os.getpid()}-live"  # a live process's temporary stays
    other = tmp_path / ".other.tmp-1-x"  # another output's stays
    mine.mkdir()
    other.mkdir()
    with OutputDir(dest, "tensors") as o:
        o.write("a.bin", b"a", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", mine.name, other.name])


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a directory another user owns (chown)")
def test_another_users_stale_temporary_is_left_alone(tmp_path):
    """In a shared folder, a temporary of the same name pattern whose pid is not alive here
    may be another user's, or a run's on another machine (issue 44): not ours to remove."""
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    theirs = tmp_path / f".out.tmp-{dead}-abc"
    (theirs / "work").mkdir(parents=True)
    (theirs / "work" / "part.bin").write_bytes(b"a colleague's build")
    for p in (theirs, theirs / "work", theirs / "work" / "part.bin"):
        os.chown(p, 65534, 65534)
    with OutputDir(tmp_path / "out", "tensors") as o:
        o.write("a.bin", b"a", "x")
    assert (theirs / "work" / "part.bin").read_bytes() == b"a colleague's build"


@pytest.mark.parametrize("kernel_exchange", [True, False])
def test_replacing_swaps_old_for_new(tmp_path, monkeypatch, kernel_exchange):
    if not kernel_exchange:
        monkeypatch.setattr(replace, "_renameat2_exchange", lambda a, b: False)
    dest = tmp_path / "out"
    for content in (b"old", b"new"):
        with OutputDir(dest, "tensors") as o:
            o.write("a.bin", content, "x")
    assert (dest / "a.bin").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_the_kernel_exchange_keeps_both_directories_present(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_text("A")
    (b / "f").write_text("B")
    if not replace._renameat2_exchange(a, b):
        pytest.skip("this kernel or file system has no renameat2(RENAME_EXCHANGE)")
    assert (a / "f").read_text() == "B" and (b / "f").read_text() == "A"
