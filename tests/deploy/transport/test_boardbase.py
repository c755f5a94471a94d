"""The shell's receiver (q25deploy/deploy/transport/boardbase.py, RECEIVE: ``tee`` into a hash, for a
board without a ``q25tok receive``), run as the board runs it: BusyBox ``sh`` with nothing but
BusyBox's applets on PATH, as root, into ``releases/.incoming-<id>/`` of an install directory
whose ``releases/`` the deploy user (uid 65534) owns (issue 44, item 2: the shell fallback
wrote through the user's links as ``q25tok receive`` did)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_user import SWAPS, USER, as_user, install_fixture, reachable_dir  # noqa: F401 (a fixture)
from requirements import need_program

from q25deploy.deploy.transport.boardbase import RECEIVE


@pytest.fixture(scope="module")
def busybox_path() -> Iterator[str]:
    """A PATH of BusyBox applets only (no openssl: BusyBox's sha256sum hashes), which the
    deploy user can reach too (pytest's directories are root's, 0700)."""
    bb = need_program("busybox", "Debian: busybox-static")
    d = reachable_dir("q25-busybox-")
    try:
        subprocess.run([bb, "--install", "-s", str(d)], check=True)
        yield str(d)
    finally:
        shutil.rmtree(d)


def receive(busybox_path: str, dest: Path, data: bytes, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(busybox_path) / "sh"), "-c", RECEIVE, "sh", str(dest)],
        input=data,
        capture_output=True,
        env={"PATH": busybox_path},
        timeout=30,  # a FIFO: a hang fails here
        **kw,
    )


@pytest.mark.parametrize("swap", list(SWAPS))
def test_roots_shell_receiver_writes_nothing_through_the_deploy_users_links(busybox_path, install, swap):
    """Issue 44 (2), the tee fallback: `tee "$1"` as root followed the link the deploy user put
    at the upload's name (root's file outside the install dir overwritten), blocked on a FIFO
    there, created root's file through a swapped-in directory link. Now: refused, one line on
    stderr, the input drained, exit 10, nothing outside written."""
    releases, outside = install["releases"], install["outside"]
    as_user(SWAPS[swap], releases, outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    r = receive(busybox_path, releases / ".incoming-1" / "q25tok", os.urandom(1 << 20))
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert r.returncode == 10 and r.stdout == b"", r
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("q25deploy: refusing to write "), lines


def test_roots_shell_receiver_writes_a_new_file_in_roots_directory(busybox_path, install):
    staging = install["releases"] / ".incoming-1"
    data = os.urandom(1 << 20)
    r = receive(busybox_path, staging / "q25tok", data)
    assert r.returncode == 0 and r.stderr == b"", r
    assert r.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    st = (staging / "q25tok").stat()
    assert (staging / "q25tok").read_bytes() == data and st.st_uid == 0 and st.st_mode & 0o777 == 0o644


def test_the_deploy_users_shell_receiver_writes_in_its_own_tree(busybox_path, install):
    """--become none: the deploy user receives into its own directory as before (no root checks)."""
    staging = install["releases"] / "mine"
    as_user('mkdir "$1"', staging)
    data = os.urandom(100_000)
    r = receive(busybox_path, staging / "q25tok", data, user=USER, group=USER, extra_groups=[])
    assert r.returncode == 0 and r.stderr == b"", r
    assert r.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    assert (staging / "q25tok").read_bytes() == data and (staging / "q25tok").stat().st_uid == USER
