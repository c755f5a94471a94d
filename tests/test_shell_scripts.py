"""Every shell script the project ships (found by its ``#!/bin/sh`` first line under
q25deploy/, recipes/ and plugins/, so a new one is covered) passes ``shellcheck -s sh``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from requirements import need_program

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("q25deploy", "recipes", "plugins")
SHEBANGS = (b"#!/bin/sh", b"#!/usr/bin/env sh")


def shell_scripts() -> list[Path]:
    found = []
    for top in SHIPPED:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            with path.open("rb") as f:
                first = f.readline().rstrip()
            if first in SHEBANGS:
                found.append(path)
    return found


def test_the_known_scripts_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in shell_scripts()}
    assert "q25deploy/ota/scripts/q25-ota.sh" in names
    assert "recipes/meta-q25/recipes-q25/q25-regions/files/q25-regions" in names


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shellcheck(script: Path):
    shellcheck = need_program("shellcheck", "apt-get install shellcheck")
    run = subprocess.run([shellcheck, "-s", "sh", str(script)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"shellcheck -s sh {script.relative_to(ROOT)}:\n{run.stdout}{run.stderr}"


def test_the_shipped_shell_is_small():
    """The shell root runs is dispatch and glue (issue 46): the release steps are `q25tok ota`,
    C that is compiled with -Werror, fuzzed and run under the sanitizers."""
    lines = sum(len(p.read_text().splitlines()) for p in shell_scripts())
    assert lines <= 300, f"{lines} lines of shipped shell (at most 300)"
