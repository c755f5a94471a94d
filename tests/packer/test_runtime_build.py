from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import pytest
from requirements import need_program

from q25deploy.cli import main
from q25deploy.errors import ToolError
from q25deploy.packer.runtime import build_runtime


def test_host_build_writes_binary_library_header_and_manifest(tmp_path, capsys):
    need_program("cc", "Debian: gcc")
    out = tmp_path / "rt"
    assert main(["runtime", "build", "--out", str(out), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    kinds = {a["path"]: a["kind"] for a in manifest["artifacts"]}
    assert kinds == {"q25tok": "runtime-binary", "libq25tok.a": "runtime-library", "q25tok.h": "runtime-header"}
    assert os.access(out / "q25tok", os.X_OK)
    assert manifest["runtime"]["target"] == "host"
    r = subprocess.run([str(out / "q25tok"), "--help"], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "exit codes" in r.stdout


def test_build_is_reproducible(tmp_path):
    need_program("cc", "Debian: gcc")
    a, b = tmp_path / "a", tmp_path / "b"
    build_runtime(a)
    build_runtime(b)
    for name in ("q25tok", "libq25tok.a", "q25tok.h"):
        assert hashlib.sha256((a / name).read_bytes()).digest() == hashlib.sha256((b / name).read_bytes()).digest()


def test_cross_build_is_aarch64(tmp_path):
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
    build_runtime(tmp_path / "arm", cross="aarch64")
    head = (tmp_path / "arm" / "q25tok").read_bytes()[:20]
    assert int.from_bytes(head[18:20], "little") == 183


def test_static_cross_build_needs_no_loader(tmp_path, capsys):
    """--static: a q25tok for boards with an older glibc or musl (it runs under qemu-aarch64
    without -L, i.e. without any aarch64 libc around)."""
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
    out = tmp_path / "arm"
    assert main(["runtime", "build", "--out", str(out), "--cross", "aarch64", "--static", "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["runtime"]["static"] and "-static" in manifest["runtime"]["toolchain"]["ldflags"]
    r = subprocess.run(["readelf", "-l", str(out / "q25tok")], capture_output=True, text=True, check=True)
    assert "INTERP" not in r.stdout
    qemu = need_program("qemu-aarch64", "Debian: qemu-user")
    r = subprocess.run([qemu, "-cpu", "cortex-a53", str(out / "q25tok"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "exit codes" in r.stdout
    assert main(["runtime", "build", "--out", str(tmp_path / "s"), "--static", "--sanitize"]) == 2


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError, match="aarch64-linux-gnu-gcc not found .*gcc-aarch64-linux-gnu"):
        build_runtime(tmp_path / "x", cross="aarch64")
    assert main(["runtime", "build", "--out", str(tmp_path / "y"), "--cross", "aarch64"]) == 9
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found" in err
    assert not (tmp_path / "y").exists()


def test_sanitize_is_host_only(tmp_path, capsys):
    assert main(["runtime", "build", "--out", str(tmp_path / "z"), "--cross", "aarch64", "--sanitize"]) == 2
    assert "host builds" in capsys.readouterr().err


def test_installed_package_carries_the_sources(tmp_path):
    """`pip install .` ships recipes/ so the installed tool can build the runtime."""
    exe = shutil.which("q25deploy")
    if exe is None:
        need_program("q25deploy", "pip install . puts the console script on PATH")
    r = subprocess.run(
        [exe, "runtime", "build", "--out", "rt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rt" / "q25tok").is_file()
