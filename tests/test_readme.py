"""The README's example commands run as written (from a scratch directory)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from requirements import need_program

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    cmds = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        cmds += [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    return cmds


def test_readme_examples_run(tmp_path):
    need_program("q25deploy", "pip install . puts the console script on PATH")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    ran = 0
    for cmd in readme_commands():
        # installing and the full test suite / benchmark are what CI itself runs
        cmd = re.sub(r"^python3 -m pip install [^&]*&& ", "", cmd)
        if "pytest" in cmd or cmd.startswith("python3 bench/"):
            continue
        r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ""}, timeout=300)
        assert r.returncode == 0, f"{cmd}\n{r.stderr}"
        ran += 1
    assert ran >= 7
    assert (tmp_path / "q25-out" / "qwen25-tokenizer" / "tokenizer.q25tokrt").is_file()
    shutil.rmtree(tmp_path / "q25-out")
