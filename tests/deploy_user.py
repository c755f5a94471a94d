"""The deploy user of issue 44's reproductions (uid 65534, nobody). Fixtures (``user_dir``:
import its ``*_fixture`` function) for tests that run root's code (tests run as root;
otherwise they skip) against that user's files."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = 65534


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("root's code against the deploy user's files: needs root (setuid to 65534)")


def reachable_dir(prefix: str) -> Path:
    """A new directory of root's (0755) under /tmp: the deploy user can reach what is in it
    (pytest's directories are root's, 0700). Removed by the caller."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    return d


@pytest.fixture(name="user_dir")
def user_dir_fixture() -> Iterator[Path]:
    """A directory of the deploy user's."""
    need_root()
    d = reachable_dir("q25-user-")
    try:
        os.chown(d, USER, USER)
        yield d
    finally:
        shutil.rmtree(d)
