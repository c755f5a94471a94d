"""An unreachable board gives one error, whichever transport finds it: ``cannot connect:
HOST:PORT: connection refused``, said before a missing known_hosts file; ``--trust-new-host``
creates a missing known_hosts file (and its directory) for the key it records."""

from __future__ import annotations

import json
import shutil
import socket
import threading

import pytest

from q25deploy.cli.app import main


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(capsys, *argv) -> dict:
    capsys.readouterr()
    code = main(["status", "--target", "qemu", "--json", *map(str, argv)])
    (result,) = json.loads(capsys.readouterr().out)
    assert code == 13
    return result


@pytest.mark.parametrize(
    "how",
    [
        pytest.param([], id="openssh"),  # the OpenSSH session (auto, ssh on PATH, no --trust-new-host)
        pytest.param(["--trust-new-host"], id="paramiko"),  # --trust-new-host: the paramiko session
    ],
)
def test_a_closed_port_is_connection_refused_through_either_transport(capsys, tmp_path, how):
    if not how and shutil.which("ssh") is None:
        pytest.skip("no ssh client: auto would be paramiko too")
    port = closed_port()
    known = tmp_path / "known_hosts"
    known.write_text("")
    r = status(capsys, "--host", f"root@127.0.0.1:{port}", "--known-hosts", known, *how)
    assert r["error"] == f"cannot connect: 127.0.0.1:{port}: connection refused"


@pytest.mark.parametrize("trust", [False, True], ids=["known-hosts", "trust-new-host"])
def test_a_missing_known_hosts_does_not_hide_an_unreachable_board(capsys, tmp_path, trust):
    port = closed_port()
    known = tmp_path / "state" / "known_hosts"
    extra = ["--trust-new-host"] if trust else []
    r = status(capsys, "--host", f"root@127.0.0.1:{port}", "--known-hosts", known, *extra)
    assert r["error"] == f"cannot connect: 127.0.0.1:{port}: connection refused"


def test_trust_new_host_creates_a_missing_known_hosts_and_its_directory(capsys, tmp_path):
    """A listener that answers no SSH: the file is made before the login, which then fails on
    the missing banner (not on the file)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        for _ in range(2):  # the probe, then the login
            conn, _ = server.accept()
            conn.close()

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    known = tmp_path / "new" / "dir" / "known_hosts"
    try:
        r = status(capsys, "--host", f"root@127.0.0.1:{port}", "--known-hosts", known, "--trust-new-host")
    finally:
        server.close()
    assert known.is_file() and known.read_text() == ""
    assert (known.parent.stat().st_mode & 0o777) == 0o700
    assert "known_hosts" not in r["error"] and "cannot connect" not in r["error"]
