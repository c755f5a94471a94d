"""The repository itself: no file carries a half-finished merge (conflict markers), which
no other test would notice in prose files such as the README or docs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(rb"^(<{7} |={7}$|>{7} )", re.M)


def test_no_tracked_file_holds_conflict_markers():
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    bad = [
        name
        for name in files.decode().split("\0")
        if name and (ROOT / name).is_file() and MARKER.search((ROOT / name).read_bytes())
    ]
    assert not bad, f"conflict markers in {bad}"
