"""The deploy user of issue 44's reproductions (uid 65534, nobody): the install directory as it
found it, and what that user does in it between root's steps. Fixtures (``user_dir``,
``install``: import their ``*_fixture`` functions) for tests that run root's code (tests run as
root; otherwise they skip) against that user's files."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = 65534

# what the deploy user does to releases/.incoming-1 between root's PREPARE and the upload
# (args: releases/, a directory of root's), the upload's name being q25tok
SWAPS = {
    # a directory of theirs, holding a link to root's file by the upload's name
    "a link": 'mv "$1/.incoming-1" "$1/.was"; mkdir "$1/.incoming-1"; ln -s "$2/shadow" "$1/.incoming-1/q25tok"',
    # one holding a FIFO by that name (the receiver hung in open(2) for the upload timeout)
    "a fifo": 'mv "$1/.incoming-1" "$1/.was"; mkdir "$1/.incoming-1"; mkfifo "$1/.incoming-1/q25tok"',
    # a link to a directory of root's (the upload became a new file of root's there)
    "a directory link": 'mv "$1/.incoming-1" "$1/.was"; ln -s "$2" "$1/.incoming-1"',
    # an empty directory of theirs (root's file in the user's tree, theirs to swap afterwards)
    "their directory": 'mv "$1/.incoming-1" "$1/.was"; mkdir "$1/.incoming-1"',
}


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("root's code against the deploy user's files: needs root (setuid to 65534)")


def as_user(script: str, *args, **kw) -> subprocess.CompletedProcess:
    """``sh -c script`` as the deploy user."""
    return subprocess.run(
        ["sh", "-c", script, "sh", *map(str, args)], user=USER, group=USER, extra_groups=[], check=True, **kw
    )


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


@pytest.fixture(name="install")
def install_fixture() -> Iterator[dict[str, Path]]:
    """An install dir as issue 44 found it: ``releases`` the deploy user's, and in it
    ``.incoming-1`` as root's PREPARE makes it (root's, 0755); beside it ``outside``, a
    directory of root's with a file of root's (``shadow``)."""
    need_root()
    top = reachable_dir("q25-install-")
    try:
        releases, outside = top / "releases", top / "etc"
        releases.mkdir(mode=0o755)
        os.chown(releases, USER, USER)
        (releases / ".incoming-1").mkdir(mode=0o755)
        outside.mkdir(mode=0o755)
        (outside / "shadow").write_bytes(b"root's file\n")
        yield {"releases": releases, "outside": outside}
    finally:
        shutil.rmtree(top)
