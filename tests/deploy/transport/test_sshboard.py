"""The session carried by OpenSSH's ssh alone (sshboard.py): one login shared through a private
control socket, host keys refused as the paramiko session refuses them, no new login behind a
cut connection, and a deploy or status that never imports paramiko."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import board_argv
from requirements import need_program
from sshd import USER, keygen

from q25deploy.deploy.transport import sshboard
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.hosts import HostSpec
from q25deploy.errors import DeployError, HostKeyError


@pytest.fixture
def client():
    need_program("ssh", "Debian: openssh-client")
    return "ssh"


def _board(ssh, known_hosts: Path, client: str) -> sshboard.OpenSshSession:
    server = ssh["servers"][0]
    spec = HostSpec("127.0.0.1", USER, server.port)
    return sshboard.OpenSshSession(spec, client, identity=str(ssh["key"]), known_hosts=str(known_hosts))


def test_one_login_carries_every_command_and_its_socket_goes_at_the_end(tmp_path, ssh, client):
    kh = ssh["servers"][0].known_hosts(tmp_path / "kh")
    board = _board(ssh, kh, client)
    control_dir = Path(board._dir)
    try:
        assert stat.S_IMODE(control_dir.stat().st_mode) == 0o700
        assert board.run(["echo", "one"])[1] == b"one\n"
        assert board.run(["sh", "-c", "cat; exit 3"], stdin=b"in", check=False)[:2] == (3, b"in")
    finally:
        board.close()
    assert not control_dir.exists()
    # the master's exit is waited for in the background (the command has nothing left to say)
    assert board.master.proc.wait(timeout=5) is not None


def _paramiko_board(ssh, known_hosts: Path, client: str) -> ParamikoSession:
    spec = HostSpec("127.0.0.1", USER, ssh["servers"][0].port)
    return ParamikoSession(spec, identity=str(ssh["key"]), known_hosts=str(known_hosts), trust_new_host=False)


def test_host_keys_are_refused_with_the_paramiko_sessions_errors(tmp_path, ssh, client):
    server = ssh["servers"][0]
    unknown = tmp_path / "empty"
    unknown.write_text("")
    other = keygen(tmp_path / "other_host_key")
    changed = tmp_path / "changed"
    kind, blob = Path(str(other) + ".pub").read_text().split()[:2]
    changed.write_text(f"[127.0.0.1]:{server.port} {kind} {blob}\n")
    for kh, word in ((unknown, "unknown host key"), (changed, "CHANGED")):
        messages = []
        for make in (_board, _paramiko_board):
            with pytest.raises(HostKeyError) as e:
                make(ssh, kh, client)
            messages.append(str(e.value))
        assert word in messages[0] and messages[0] == messages[1]


def test_a_cut_connection_fails_the_next_command_without_a_new_login(tmp_path, ssh, client):
    board = _board(ssh, ssh["servers"][0].known_hosts(tmp_path / "kh"), client)
    try:
        board.master.proc.kill()
        board.master.proc.wait()
        with pytest.raises(DeployError, match="connection lost"):
            board.run(["true"])
    finally:
        board.close()


def test_a_users_ssh_config_or_trust_new_host_keeps_paramiko(tmp_path, monkeypatch, client):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sshboard.usable(transfer="auto", trust_new_host=False) is not None
    assert sshboard.usable(transfer="paramiko", trust_new_host=False) is None
    assert sshboard.usable(transfer="auto", trust_new_host=True) is None
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host board\n  HostName 10.0.0.5\n")
    assert sshboard.usable(transfer="auto", trust_new_host=False) is None


def test_deploy_and_status_never_import_paramiko(tmp_path, ssh, models, q25tok, client):
    """Start-up time: the whole command on OpenSSH, without fabric, invoke, paramiko or cryptography."""
    server = ssh["servers"][1]
    root = tmp_path / "board"
    deploy = board_argv("deploy", ssh, server, root, "--build", str(models["A"]), "--runtime-bin", str(q25tok))
    status = board_argv("status", ssh, server, root)
    code = (
        "import json, sys\nfrom q25deploy.cli import main\n"
        f"codes = [main({deploy + ['--allow-unreserved', '--json']!r}), main({status + ['--json']!r})]\n"
        "print(json.dumps([codes, sorted(m for m in ('paramiko', 'fabric', 'invoke', 'cryptography') if m in sys.modules)]))"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    codes, heavy = json.loads(r.stdout.splitlines()[-1])
    assert codes == [0, 0], r.stdout + r.stderr
    assert heavy == []
    assert not list(tmp_path.glob("q25ssh-*"))  # the control directories are gone
