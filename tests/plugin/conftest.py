"""The out-of-tree plugins of tests/plugin/plugins, pip-installed (offline) into a directory of
their own, and the q25deploy console script run with that directory on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_program

PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory) -> Path:
    """ultra96 (a board with a command), broken (fails to import), badcmd (broken commands)."""
    site = tmp_path_factory.mktemp("site")
    for name in ("ultra96", "broken", "badcmd"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--target",
                str(site),
                str(PLUGINS / name),
            ],
            check=True,
            capture_output=True,
        )
    return site


@pytest.fixture(scope="session")
def q25_site(plugin_site):
    """``q25_site(*args)``: run q25deploy with the installed plugins; the CompletedProcess."""
    exe = shutil.which("q25deploy") or need_program("q25deploy", "pip install . puts the console script on PATH")

    def run(*args, cwd=None) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(plugin_site)}
        return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, check=False)

    return run
