"""Uploads through OpenSSH's ssh client (q25deploy/deploy/transport/openssh.py) to a real sshd on
loopback, with a real ssh behind a PATH spy that records how it was started: it logs in as
the paramiko session did, the board's q25tok receives and hashes, a receiver's failure is
the upload's, and an ssh that cannot log in (a key it refuses) hands over to paramiko, or,
asked for by name, fails in one line."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from deploy_helpers import deploy
from requirements import need_program
from sshd import USER

from q25deploy.deploy.transport import openssh
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.hosts import HostSpec
from q25deploy.errors import DeployError

BIG = openssh.MIN_SIZE + 12345  # a large file: sent through ssh under --transfer auto


@pytest.fixture
def spy(tmp_path, monkeypatch) -> Path:
    """``ssh`` first on PATH: writes each command line (NUL-separated) to a file of its own in
    the returned directory (uploads start ssh in parallel), then runs the real client."""
    real = need_program("ssh", "Debian: openssh-client")
    bindir, log = tmp_path / "spy", tmp_path / "ssh-calls"
    bindir.mkdir()
    log.mkdir()
    (bindir / "ssh").write_text(
        f"#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$(mktemp '{log}/call.XXXXXX')\"\nexec '{real}' \"$@\"\n"
    )
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return log


def logins(log: Path) -> list[list[str]]:
    """The recorded command lines that ran a command on a board (not ``ssh -Q``)."""
    calls = [p.read_bytes().decode().split("\0")[:-1] for p in sorted(log.iterdir())]
    return [argv for argv in calls if "--" in argv]


def board(ssh, server, tmp_path, *, identity=None, transfer="auto") -> ParamikoSession:
    kh = server.known_hosts(tmp_path / f"kh_{server.port}")
    return ParamikoSession(
        HostSpec("127.0.0.1", USER, server.port),
        identity=str(identity or ssh["key"]),
        known_hosts=str(kh),
        trust_new_host=False,
        transfer=transfer,
    )


def payload(tmp_path: Path, size: int) -> Path:
    path = tmp_path / f"payload_{size}"
    path.write_bytes(os.urandom(size))
    return path


def test_a_large_file_goes_through_ssh_logged_in_as_the_session(tmp_path, ssh, q25tok, spy):
    server, src = ssh["servers"][0], payload(tmp_path, BIG)
    small, dest = payload(tmp_path, 1 << 20), tmp_path / "board"
    dest.mkdir()
    with board(ssh, server, tmp_path) as b, open(src, "rb") as f, open(small, "rb") as g:
        b.receiver = str(q25tok)
        progress = []
        digest = b.upload(f, BIG, str(dest / "big.bin"), progress=progress.append)
        assert b.upload(g, 1 << 20, str(dest / "small.bin")) == hashlib.sha256(small.read_bytes()).hexdigest()
        assert b.notes == []
    assert digest == hashlib.sha256(src.read_bytes()).hexdigest()
    assert (dest / "big.bin").read_bytes() == src.read_bytes() and sum(progress) == BIG
    (argv,) = logins(spy)  # the small file went through the session
    opts = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert argv[:2] == ["-F", "none"] and argv[argv.index("--") + 1] == "127.0.0.1"
    assert {
        f"HostKeyAlias=[127.0.0.1]:{server.port}",
        "StrictHostKeyChecking=yes",
        "BatchMode=yes",
        f"IdentityFile={ssh['key']}",
        "IdentitiesOnly=yes",
        "UpdateHostKeys=no",
    } <= opts
    assert argv[-1].endswith(f"{q25tok} receive {dest / 'big.bin'}")


def test_a_receiver_failure_fails_the_upload(tmp_path, ssh, q25tok, spy):
    server, src = ssh["servers"][0], payload(tmp_path, BIG)
    with board(ssh, server, tmp_path) as b, open(src, "rb") as f:
        b.receiver = str(q25tok)
        with pytest.raises(DeployError, match=r"writing .*/missing/big.bin failed \(1: .*No such file"):
            b.upload(f, BIG, str(tmp_path / "missing" / "big.bin"))
    assert len(logins(spy)) == 1


def test_an_ssh_that_cannot_log_in_hands_over_to_paramiko(tmp_path, ssh, q25tok, spy):
    """OpenSSH ignores a private key others can read; paramiko logs in with it."""
    loose = tmp_path / "loose_key"
    shutil.copyfile(ssh["key"], loose)
    loose.chmod(0o644)
    server, src, dest = ssh["servers"][1], payload(tmp_path, BIG), tmp_path / "out.bin"
    with board(ssh, server, tmp_path, identity=loose) as b, open(src, "rb") as f:
        b.receiver = str(q25tok)
        assert b.upload(f, BIG, str(dest)) == hashlib.sha256(src.read_bytes()).hexdigest()
        assert b.bulk is None and len(b.notes) == 1 and "did not log in" in b.notes[0], b.notes
        assert "Permission denied" in b.notes[0]
    assert dest.read_bytes() == src.read_bytes() and len(logins(spy)) == 1
    with board(ssh, server, tmp_path, identity=loose, transfer="openssh") as b, open(src, "rb") as f:
        b.receiver = str(q25tok)
        with pytest.raises(DeployError, match="--transfer openssh: ssh did not log in"):
            b.upload(f, BIG, str(dest))


def test_paths_ssh_would_expand_or_split_are_not_given_to_it():
    login = openssh.Login(
        "127.0.0.1", 22, "root", "board", "/home/u/known hosts", None, 5.0, ("aes128-ctr",), ("hmac-sha2-256",)
    )
    assert openssh.ssh_argv("ssh", login, "true") is None  # UserKnownHostsFile splits on spaces
    assert openssh.ssh_argv("ssh", replace(login, known_hosts="/k/${HOME}"), "true") is None  # expanded
    assert openssh.ssh_argv("ssh", replace(login, known_hosts="/k/kh", identity="/k/my key"), "true") is None
    ok = openssh.Login(
        "127.0.0.1", 22, "root", "board", "/k/100%/known_hosts", "/k/id%d", 5.0, ("aes128-ctr",), ("hmac-sha2-256",)
    )
    argv = openssh.ssh_argv(need_program("ssh", "Debian: openssh-client"), ok, "true")
    assert "UserKnownHostsFile=/k/100%%/known_hosts" in argv and "IdentityFile=/k/id%%d" in argv
    none = openssh.Login("127.0.0.1", 22, "root", "board", "/k/kh", None, 5.0, ("no-such-cipher",), ("hmac-sha2-256",))
    assert openssh.ssh_argv("ssh", none, "true") is None  # no cipher in common with this client


def test_deploy_with_transfer_openssh(tmp_path, capsys, ssh, models, q25tok, spy):
    """Every file the release's q25tok receives goes through ssh; the release's q25tok itself
    first, through the session."""
    server, root = ssh["servers"][2], tmp_path / "board"
    code, res, err = deploy(capsys, ssh, server, root, models["A"], "--transfer", "openssh", runtime=q25tok)
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], (res, err)
    assert len(logins(spy)) == res[0]["files_sent"] - 1
    assert [w for w in res[0]["warnings"] if not w.startswith("sent anyway (--allow-unreserved)")] == []
    current = os.readlink(root / "lib" / "firmware" / "q25" / "current")
    # a key OpenSSH ignores (others can read it): asked for by name, the deploy fails in one line
    loose = tmp_path / "loose_key"
    shutil.copyfile(ssh["key"], loose)
    loose.chmod(0o644)
    ssh = {**ssh, "key": loose}
    code, res, _ = deploy(capsys, ssh, server, root, models["B"], "--transfer", "openssh", runtime=q25tok)
    assert code == 13 and "--transfer openssh: ssh did not log in" in res[0]["error"], res
    assert "\n" not in res[0]["error"] and os.readlink(root / "lib" / "firmware" / "q25" / "current") == current


def test_the_session_gate_keeps_starts_and_ends_apart():
    """dropbear 2022.82-2024.85 closes a session that has not started its command when another
    session of the connection ends meanwhile (openssh.SessionGate): starts wait for ends, ends
    for starts; starts run together, and so do ends."""
    import threading
    import time

    gate = openssh.SessionGate()
    first, second = gate.enter("start"), gate.enter("start")  # starts together: no wait
    entered = threading.Event()

    def end() -> None:
        leave = gate.enter("end")
        entered.set()
        leave()

    t = threading.Thread(target=end)
    t.start()
    first()
    first()  # leaving twice counts once
    assert not entered.wait(0.2)  # the second start is still under way
    second()
    assert entered.wait(5)
    t.join()
    ending = gate.enter("end")
    also = gate.enter("end")  # ends together
    slow = openssh.SessionGate(wait=0.3)
    stuck = slow.enter("end")  # a start meets an end that never leaves: bounded
    t0 = time.monotonic()
    slow.enter("start")()
    assert 0.25 < time.monotonic() - t0 < 5
    for leave in (ending, also, stuck):
        leave()
