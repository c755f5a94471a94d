"""mypy and ruff over the tree, with pyproject.toml's configuration (CI's "lint and types"
stage runs them too). mypy is the test that catches what no unit test saw: deploy() declared
its smoke callback as smoke(quick) while fleet.py passed and deploy() called smoke(quick,
residency); board/svg.py read Region fields through a Span variable; packer/pipeline.py reused
one variable for the cache's manifest rows and for Assets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from requirements import need_module

ROOT = Path(__file__).resolve().parent.parent


def check(*argv: str) -> None:
    r = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(argv)}:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"


def test_mypy_finds_nothing():
    need_module("mypy", "pip install '.[test]'")
    check("mypy")


def test_ruff_finds_nothing():
    need_module("ruff", "pip install '.[test]'")
    check("ruff", "check", ".")
