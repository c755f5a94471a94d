"""Which board-side command receives each upload (q25deploy/deploy/ops/receiver.py), against real
sshd boards: the image's q25tok, never one in the install dir (the release's own, staged or
current: issue 33, root runs only what it verified); a q25tok that predates ``receive`` is
passed over for the shell's ``tee``; a kept q25tok found damaged is repaired by the shell."""

from __future__ import annotations

import os
import posixpath
import subprocess

import pytest
from deploy_helpers import deploy, older_q25tok

from q25deploy.deploy.ops import receiver
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.sshboard import OpenSshSession
from q25deploy.resources import data_dir


@pytest.fixture
def received(monkeypatch):
    """(file name, the board's receiver) for every upload (a spy: the uploads are real)."""
    seen: list[tuple[str, str | None]] = []
    for cls in (ParamikoSession, OpenSshSession):  # the paramiko session's, the OpenSSH session's

        def spy(self, src, size, dest, progress=None, real=cls.upload):
            seen.append((posixpath.basename(dest), self.receiver))
            return real(self, src, size, dest, progress)

        monkeypatch.setattr(cls, "upload", spy)
    return seen


def test_no_q25tok_of_the_install_dir_receives(tmp_path, capsys, ssh, models, q25tok, received):
    """Issue 33 (3): the release's own q25tok, staged, received the rest, and on the next
    deploy the current release's did: files whoever can write the install dir controls, run
    as root under --become. Without an image q25tok, the shell receives."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], err
    # the release's own through the shell, then a private copy of it (outside the install dir)
    assert received[0] == ("q25tok", None) and all(private(r, root) for _, r in received[1:]), received
    received.clear()
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0 and res[0]["ok"] and received
    # the kept q25tok is linked, not sent: a private copy of it, hashed first, receives
    assert all(private(r, root) for _, r in received), received


def private(receiver: str | None, root) -> bool:
    """A private copy of the runtime just sent: in a directory mktemp made, not the install dir."""
    return receiver is not None and "/q25tok." in receiver and str(root) not in receiver


def test_the_images_q25tok_receives_when_the_releases_predates_receive(tmp_path, capsys, ssh, models, q25tok, received):
    srv, root = ssh["servers"][1], tmp_path / "board"
    board = tmp_path / "qemu.toml"  # the image's q25tok (the board file's [install] runtime) has receive
    board.write_text(
        (data_dir("targets") / "qemu.toml")
        .read_text()
        .replace('path = "/lib/firmware/q25"', f'path = "/lib/firmware/q25"\nruntime = "{q25tok}"')
    )
    older = older_q25tok(tmp_path, q25tok)
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], "--target-file", str(board), runtime=older)
    assert code == 0 and res[0]["ok"], err
    assert received[0] == ("q25tok", None)  # the release's, by the shell: tried first, passed over
    assert len(received) > 1 and all(r == str(q25tok) for _, r in received[1:]), received


def test_no_q25tok_that_receives_falls_back_to_the_shell(tmp_path, capsys, ssh, models, q25tok, received):
    srv, root = ssh["servers"][2], tmp_path / "board"
    older = older_q25tok(tmp_path, q25tok)
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=older)
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], err
    assert received and all(r is None for _, r in received), received
    received.clear()
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=older)  # current's q25tok: no receive either
    assert code == 0 and res[0]["ok"] and received and all(r is None for _, r in received), received


def test_a_damaged_kept_runtime_is_repaired_by_the_shell_then_receives(tmp_path, capsys, ssh, models, q25tok, received):
    """--verify-board finds the kept q25tok damaged: it is sent again (through the shell) as a
    new file, not linked: the kept copy is not written (no receiver writes through a link,
    issue 44), and nothing of the install dir receives."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    kept = next((root / "lib/firmware/q25/releases").glob("*/q25tok"))
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 0xFF
    kept.write_bytes(bytes(data))
    received.clear()
    code, res, err = deploy(capsys, ssh, srv, root, models["B"], "--verify-board", runtime=q25tok)
    assert code == 0 and res[0]["ok"], (res, err)
    current = root / "lib/firmware/q25/current/q25tok"
    assert received[0] == ("q25tok", None) and current.read_bytes() == q25tok.read_bytes()
    assert kept.read_bytes() == bytes(data) and kept.stat().st_ino != current.stat().st_ino
    assert all(private(r, root) for _, r in received[1:]), received


# a q25tok as before issue 44: its receive truncates a file that exists (as tee), following links
TRUNCATING = '#!/bin/sh\n[ "$1" = receive ] && tee "$2" | sha256sum | cut -d" " -f1\n'


def test_the_probe_passes_over_a_q25tok_that_writes_into_an_existing_file(tmp_path, q25tok):
    """Issue 44 (2): an image's q25tok from before the fix received through the deploy user's
    links as root; the probe takes only one that refuses a file that exists (exit 10)."""
    old = tmp_path / "old-q25tok"
    old.write_text(TRUNCATING)
    old.chmod(0o755)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for candidates, chosen in (([old, q25tok], q25tok), ([old], None)):
        r = subprocess.run(
            ["sh", "-c", receiver.PROBE, "sh", *map(str, candidates)], capture_output=True, text=True, env=env
        )
        assert r.returncode == 0 and r.stdout == (f"{chosen}\n" if chosen else ""), r
    assert list(tmp_path.iterdir()) == [old]  # the probe's directory removed
