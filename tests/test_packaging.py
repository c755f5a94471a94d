"""`pip install .` (not only editable) must ship every data file the tool reads: build the
wheel offline and compare it with the repository's data folders."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD_PRODUCTS = {".o", ".a", ".pyc"}


def test_wheel_ships_all_data(tmp_path):
    src = tmp_path / "src"  # a clean copy: a stale build/ folder must not hide a missing pattern
    junk = shutil.ignore_patterns(
        "*.egg-info", ".git", "__pycache__", ".*cache*", ".hypothesis", "q25-out", "q25-build"
    )

    def ignore(folder: str, names: list[str]) -> set[str]:  # the top-level build/ only
        return set(junk(folder, names)) | ({"build", "dist"} & set(names) if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, src, ignore=ignore, symlinks=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    names = set(zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist())
    expected = set()
    for p in (ROOT / "q25deploy").rglob("*.py"):  # every module, subpackages included
        expected.add(p.relative_to(ROOT).as_posix())
    for folder, package in (
        ("q25deploy/data", "q25deploy/data"),
        ("q25deploy/ota/scripts", "q25deploy/ota/scripts"),
        ("recipes", "q25deploy/_recipes"),
        ("targets", "q25deploy/_targets"),
        ("plugins", "q25deploy_plugins"),
    ):
        for p in (ROOT / folder).rglob("*"):
            if (
                p.is_file()
                and p.suffix not in BUILD_PRODUCTS
                and "__pycache__" not in p.parts
                and p.name not in ("q25tok", "q25tok_fuzz")
            ):
                expected.add(f"{package}/{p.relative_to(ROOT / folder).as_posix()}")
    assert expected - names == set()
    assert not [n for n in names if n.endswith((".o", ".a")) or n.endswith("/q25tok")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).read(entry_points).decode()
    assert "[q25deploy]" in text and "kv260 = q25deploy_plugins.kv260" in text
