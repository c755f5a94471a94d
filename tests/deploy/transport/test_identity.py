"""``--identity`` mistakes: each local one is a usage error (exit 2) naming the fix, before any board
is contacted; a key the board refuses names the user, the key and where its .pub must go."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import board_argv
from deploy_user import USER as USER_ID
from deploy_user import reachable_dir
from sshd import USER

from q25deploy.cli import main


@pytest.fixture
def listener():
    """A port that records whether anything connected to it: the board no local mistake may reach."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s
    s.close()


def _contacted(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
        return True
    except BlockingIOError:
        return False


def _run(capsys, listener, tmp_path, key: str, monkeypatch) -> tuple[int, str]:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    port = listener.getsockname()[1]
    argv = [
        "status",
        "--target",
        "qemu",
        "--host",
        f"root@127.0.0.1:{port}",
        "--identity",
        key,
        "--known-hosts",
        str(tmp_path / "known_hosts"),
        "--remote-root",
        str(tmp_path / "board"),
    ]
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert not _contacted(listener), "a local --identity mistake contacted the board"
    assert "\n" not in err and "Traceback" not in err, err
    return code, err


def _keygen(path, passphrase: str = ""):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True)
    return path


def test_local_identity_mistakes_are_usage_errors_before_any_board(tmp_path, capsys, listener, monkeypatch):
    key = _keygen(tmp_path / "id_ed25519")
    shutil.copy(f"{key}.pub", tmp_path / "renamed")  # a public key under a private key's name
    (tmp_path / "notes.txt").write_text("my deploy key is on the wiki\n")
    locked = _keygen(tmp_path / "locked", passphrase="correct horse")
    cases = {
        str(tmp_path / "id_rsa"): "no such key file: give the path of your SSH private key",
        str(tmp_path): "is a directory: give the private key file in it",
        f"{key}.pub": f"that is the public key; pass the private key {key} without .pub",
        str(tmp_path / "renamed"): "that is the public key; pass the private key its private key without .pub",
        str(tmp_path / "notes.txt"): "not an SSH private key",
        str(
            locked
        ): f"{locked} is encrypted: add it to ssh-agent (`ssh-add {locked}`) or use an unencrypted deploy key",
    }
    for given, fix in cases.items():
        code, err = _run(capsys, listener, tmp_path, given, monkeypatch)
        assert code == 2 and f"--identity {given}: " in err and fix in err, (given, err)


def test_an_unreadable_key_is_a_usage_error(tmp_path, capsys, listener, monkeypatch):
    """As the deploy user (uid 65534) when the tests run as root, who reads a mode-000 file."""
    if os.geteuid() != 0:
        key = _keygen(tmp_path / "id_ed25519")
        key.chmod(0)
        code, err = _run(capsys, listener, tmp_path, str(key), monkeypatch)
        assert code == 2 and f"--identity {key}: cannot read it (Permission denied)" in err
        return
    d = reachable_dir("q25-identity-")
    try:
        key = _keygen(d / "id_ed25519")
        os.chown(key, USER_ID, USER_ID)
        key.chmod(0)
        python = shutil.which("python3", path="/usr/bin:/bin")  # the system's: the deploy user can run it
        if python is None:
            pytest.skip("no /usr/bin/python3 the deploy user can run")
        check = "from q25deploy.deploy.transport.identity import check_identity as c; import sys; c(sys.argv[1])"
        root = Path(__file__).resolve().parents[3]
        env = {**os.environ, "PYTHONPATH": str(root), "HOME": str(d)}
        r = subprocess.run(
            [python, "-c", check, str(key)],
            user=USER_ID,
            group=USER_ID,
            extra_groups=[],
            env=env,
            capture_output=True,
            text=True,
            cwd=d,
            timeout=60,
        )
        assert r.returncode != 0 and f"UsageError: --identity {key}: cannot read it (Permission denied)" in r.stderr, (
            r.stderr
        )
    finally:
        shutil.rmtree(d)


def test_a_key_the_board_refuses_names_the_user_the_key_and_the_fix(tmp_path, capsys, ssh, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    srv = ssh["servers"][0]
    stranger = _keygen(tmp_path / "stranger")  # a real key, not in the board's authorized_keys
    argv = board_argv("status", ssh, srv, tmp_path / "board")
    argv[argv.index("--identity") + 1] = str(stranger)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    text = out + err
    assert code != 0 and code != 70 and code != 2
    assert (
        f"{USER}@127.0.0.1 refused the key {stranger} (publickey): add {stranger}.pub to ~{USER}/.ssh/authorized_keys "
        "on the board, or pass --identity with the key it has (or --host USER@HOST for another user)"
    ) in text, text


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """An ssh-agent of this test's own (its socket under tmp_path), as $SSH_AUTH_SOCK."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if sock.exists():
            break
        subprocess.run(["sleep", "0.05"])
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    yield sock
    proc.terminate()
    proc.wait(timeout=10)


def test_an_encrypted_key_an_agent_holds_logs_in_through_the_agent(tmp_path, capsys, ssh, agent):
    key = tmp_path / "deploy_key"
    shutil.copy(ssh["key"], key)  # the key the board authorizes, then encrypted: only the agent can use it
    key.chmod(0o600)
    subprocess.run(["ssh-add", "-q", str(key)], check=True, capture_output=True)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "correct horse", "-f", str(key)], check=True)
    srv = ssh["servers"][0]
    argv = board_argv("status", ssh, srv, tmp_path / "board", "--json")
    argv[argv.index("--identity") + 1] = str(key)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err


def test_a_refusal_without_identity_says_where_the_keys_came_from():
    from q25deploy.deploy.transport.hosts import HostSpec
    from q25deploy.deploy.transport.identity import refused

    spec = HostSpec("kv260-1", "petalinux", 22)
    said = str(refused(spec, None))
    assert "petalinux@kv260-1 refused every key of ssh-agent and ~/.ssh (publickey)" in said
    assert "~petalinux/.ssh/authorized_keys" in said and "\n" not in said
