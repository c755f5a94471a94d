"""The board side of :mod:`q25deploy.deploy.state.trusted_q25tok` (``COPY``) under the two shells
boards have: a release's q25tok is run only as a private copy whose sha256 is the
workstation's digest, or one a record written by the user running it names (issue 33, 3)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from requirements import need_program

from q25deploy.deploy.state.trusted_q25tok import COPY

SHELLS = {"dash": ["dash", "-c"], "busybox": ["busybox", "sh", "-c"]}


def copy(shell: str, q25tok: Path, sha: str, record: str = "-") -> subprocess.CompletedProcess:
    need_program(SHELLS[shell][0], "Debian: dash / busybox-static")
    env = {**os.environ, "TMPDIR": str(q25tok.parent)}
    return subprocess.run(
        [*SHELLS[shell], COPY, "sh", str(q25tok), sha, record], capture_output=True, text=True, timeout=60, env=env
    )


@pytest.fixture
def release(tmp_path) -> tuple[Path, str, Path]:
    q = tmp_path / "q25tok"
    q.write_bytes(b"#!/bin/sh\necho the release's q25tok\n")
    state = tmp_path / "state.json"
    sha = hashlib.sha256(q.read_bytes()).hexdigest()
    state.write_text(f'{{"files": {{"q25tok": ["{sha}", 38]}}}}\n')
    state.chmod(0o644)
    return q, sha, state


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_the_copy_is_private_and_of_the_recorded_digest(release, shell):
    q, sha, state = release
    for record in ("-", str(state)):
        r = copy(shell, q, sha, record)
        assert r.returncode == 0, r.stdout + r.stderr
        private = Path(r.stdout.strip())
        assert private.read_bytes() == q.read_bytes() and private.parent != q.parent
        assert oct(private.parent.stat().st_mode & 0o777) == "0o700"
    q.write_bytes(b"#!/bin/sh\necho planted\n")  # whoever writes the install dir
    r = copy(shell, q, sha)
    assert r.returncode == 3 and "not the recorded one" in r.stdout
    assert len([p for p in q.parent.iterdir() if p.name.startswith("q25tok.")]) == 2  # the refused one: removed


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_a_record_not_written_by_the_runner_or_not_naming_the_digest_is_refused(release, shell):
    q, sha, state = release
    assert copy(shell, q, "0" * 64, str(state)).stdout.strip().endswith("does not record its sha256")
    state.chmod(0o666)
    assert copy(shell, q, sha, str(state)).stdout.strip().endswith("is writable by others")
    state.chmod(0o644)
    if os.geteuid() == 0:  # a record someone else wrote (replaced): theirs, not the runner's
        os.chown(state, 1000, 1000)
        assert "was not written by" in copy(shell, q, sha, str(state)).stdout
        os.chown(state, 0, 0)
        root_record_for_a_user(shell, q, sha, state)
    fifo = q.parent / "fifo"
    os.mkfifo(fifo)
    assert copy(shell, fifo, sha).returncode == 3  # never opened: not a regular file


def root_record_for_a_user(shell: str, q: Path, sha: str, state: Path) -> None:
    """A login that is not root (uid 1000) trusts a record root wrote: its private copy runs."""
    d = Path(tempfile.mkdtemp(prefix="q25-trust-"))  # under /tmp, which uid 1000 can reach
    try:
        d.chmod(0o755)
        shutil.copy(q, d / "q25tok")
        shutil.copy(state, d / "state.json")  # root's, mode 0644
        (d / "q25tok").chmod(0o755)
        (d / "state.json").chmod(0o644)
        argv = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", *SHELLS[shell]]
        argv += [COPY, "sh", str(d / "q25tok"), sha, str(d / "state.json")]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "TMPDIR": "/tmp"})
        assert r.returncode == 0 and r.stdout.strip().startswith("/tmp/q25tok."), (r.stdout, r.stderr)
        shutil.rmtree(Path(r.stdout.strip()).parent)
    finally:
        shutil.rmtree(d)


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_a_record_a_deploy_user_linked_or_holds_is_not_trusted(release, shell, tmp_path):
    """Issue 44: a record root wrote is trusted only where only root can write. A hard link to
    it (kept by a user who once could write here) or a directory the user (uid 65534) owns or
    others can write (where it may have been moved in) is refused: the image's q25tok runs."""
    q, sha, state = release
    link = tmp_path / "kept"
    os.link(state, link)
    assert copy(shell, q, sha, str(state)).stdout.strip().endswith("has other hard links: not a record of its own")
    link.unlink()
    tmp_path.chmod(0o770)
    assert copy(shell, q, sha, str(state)).stdout.strip().endswith(f"(holding {state}) is writable by others")
    tmp_path.chmod(0o700)
    if os.geteuid() == 0:  # the record is root's; the directory holding it the deploy user's
        os.chown(tmp_path, 65534, 65534)
        said = copy(shell, q, sha, str(state)).stdout.strip()
        assert said.startswith(f"{tmp_path} (holding {state}) is not root's"), said
        os.chown(tmp_path, 0, 0)
    assert copy(shell, q, sha, str(state)).returncode == 0  # root's alone again: trusted
