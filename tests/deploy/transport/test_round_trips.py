"""Issue 12 against real sshd boards: few round trips (every short command through one agent
channel, a channel per uploaded file), nothing proven twice, smoke and status from the
board's own release without a build, and a damaged kept file repaired (issue 11, defect 3)."""

from __future__ import annotations

import json
import os
import socket

import pytest
from deploy_helpers import INSTALL, board_argv, deploy
from sshd import USER

from q25deploy.cli import main
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.hosts import HostSpec
from q25deploy.deploy.transport.session import QuickAckSocket
from q25deploy.deploy.transport.sshboard import OpenSshSession


@pytest.fixture
def channels(monkeypatch):
    """Every SSH channel a command opens, by its first word (a spy: the channels are real)."""
    opened: list[str] = []
    name = lambda argv: argv[0] if argv[0] != "sh" else argv[2].split()[0][:12]  # noqa: E731
    real, start, upload = ParamikoSession._channel, OpenSshSession.start, OpenSshSession.upload

    def spy(self, argv, timeout):
        opened.append(name(argv))
        return real(self, argv, timeout)

    def spy_start(self, argv, timeout):  # the OpenSSH session: a session through the master
        opened.append(name(argv))
        return start(self, argv, timeout)

    def spy_upload(self, src, size, dest, progress=None):  # and one per file
        opened.append("receive")
        return upload(self, src, size, dest, progress)

    monkeypatch.setattr(ParamikoSession, "_channel", spy)
    monkeypatch.setattr(OpenSshSession, "start", spy_start)
    monkeypatch.setattr(OpenSshSession, "upload", spy_upload)
    return opened


def board_only(capsys, ssh, srv, root, action, *extra):
    """smoke / status with no build at all (any workstation with the board file and a key)."""
    argv = board_argv(action, ssh, srv, root, "--json", *extra)
    capsys.readouterr()
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_one_channel_per_session_plus_one_per_uploaded_file(tmp_path, capsys, ssh, models, q25tok, channels):
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0 and len(channels) == 1 + res[0]["files_sent"], (channels, res)
    channels.clear()
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)  # unchanged: one exec
    assert code == 0 and res[0]["bytes_sent"] == 0 and len(channels) == 1, channels
    channels.clear()
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="status")
    # status: every command through the login's own session (its agent), no channel more
    assert code == 0 and res[0]["consistent"] and res[0]["residency"] and len(channels) == 0, channels
    channels.clear()
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0 and len(channels) == 1 + res[0]["files_sent"], (channels, res)


def test_smoke_and_status_from_the_boards_own_release(tmp_path, capsys, ssh, models, q25tok, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    srv, root = ssh["servers"][1], tmp_path / "board"
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    code, res = board_only(capsys, ssh, srv, root, "smoke")
    assert code == 0 and res[0]["ok"], res
    names = [c["name"] for c in res[0]["smoke"]["checks"]]
    assert "partition sha256" in names and sum(n.startswith("encode") for n in names) >= 7
    cached = list((tmp_path / "cache" / "q25deploy" / "board-images").iterdir())
    assert (
        len(cached) == 1 and cached[0].read_bytes() == (root / INSTALL / "current" / "tokenizer.q25tokrt").read_bytes()
    )
    code, res = board_only(capsys, ssh, srv, root, "smoke", "--quick")
    assert code == 0 and "partition sha256" not in [c["name"] for c in res[0]["smoke"]["checks"]]
    code, res = board_only(capsys, ssh, srv, root, "status")
    assert code == 0 and res[0]["consistent"] and res[0]["release"]["vocab_fingerprint"]
    # a damaged image on the board is caught against the state's digest, not trusted
    cached[0].unlink()
    image = root / INSTALL / "current" / "tokenizer.q25tokrt"
    data = bytearray(image.read_bytes())
    data[100] ^= 1
    image.write_bytes(bytes(data))
    code, res = board_only(capsys, ssh, srv, root, "smoke")
    assert code == 13 and "does not match its sha256" in res[0]["error"]
    # with --build of another model of the same vocabulary: compared, and said
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], action="smoke")
    assert any("another model" in w for w in res[0]["warnings"]), res


def test_a_tokenizer_only_update_does_not_hash_the_unchanged_partitions(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][2], tmp_path / "board"
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], "--tokenizer-only", runtime=q25tok)
    image = models["B"] / "tokenizer" / "tokenizer.q25tokrt"
    assert code == 0 and res[0]["ok"] and res[0]["bytes_sent"] < image.stat().st_size + 65536, res  # no partition
    names = [c["name"] for c in res[0]["smoke"]["checks"]]
    assert "partition sha256" not in names and sum(n.startswith("encode") for n in names) >= 7


def test_a_damaged_kept_file_is_sent_again_and_counted(tmp_path, capsys, ssh, models, q25tok):
    """Defect 3: a file in a kept release rots on the board; a deploy that would link it hashes
    the kept files (--verify-board), sends the damaged one again and says how many bytes went.
    It is sent as a new file, not linked: the kept copy is not written (before issue 44 the
    receiver truncated the shared inode, which repaired it, but a receiver that writes through
    a link is one the deploy user can point at a file of root's)."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    release_a = res[0]["release"]
    rt = root / INSTALL / "releases" / release_a / "q25tok"
    rt.chmod(0o755)
    data = bytearray(rt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    rt.write_bytes(bytes(data))
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], "--verify-board", runtime=q25tok)
    assert code == 0 and res[0]["ok"], res
    assert res[0]["bytes_sent"] == sum(f.stat().st_size for f in _sent_files(models["B"])) + q25tok.stat().st_size
    # linked: only what B shares with A (the hyperparameters of the same shape), no more q25tok: sent
    assert res[0]["files_linked"] == _unchanged_files(models["B"]) and any("q25tok" in w for w in res[0]["warnings"])
    current = root / INSTALL / "current" / "q25tok"
    assert current.read_bytes() == q25tok.read_bytes() and rt.read_bytes() == bytes(data)
    assert os.stat(rt).st_ino != os.stat(current).st_ino


_RELEASE_NAMES = {
    "tokenizer/tokenizer.q25tokrt",
    "tokenizer/tokenizer_runtime_image_manifest.json",
    "partition_map.json",
    "model_hparams.txt",
    "forward_record.json",
}


def _digests(b):
    return {a["path"]: (a["sha256"], a["size"]) for a in json.loads((b / "manifest.json").read_text())["artifacts"]}


def _sent_files(build):
    """The release files of ``build`` whose bytes differ from model A's (the partitions and map)."""
    a, b = _digests(build.parent / "A"), _digests(build)
    return [build / p for p, v in b.items() if (p in _RELEASE_NAMES or p.startswith("partitions/")) and a.get(p) != v]


def _unchanged_files(build) -> int:
    """How many release files of ``build`` model A's release already has (the board links them)."""
    a, b = _digests(build.parent / "A"), _digests(build)
    return sum(1 for p, v in b.items() if (p in _RELEASE_NAMES or p.startswith("partitions/")) and a.get(p) == v)


def test_requests_and_acknowledgements_go_out_at_once(ssh):
    """TCP_NODELAY on the board connection: with Nagle's algorithm each channel open or exec
    that followed a small write waited for the board's delayed ACK.
    And quick ACKs: sshd holds a reply's second small packet until we acknowledge the first
    (the board lock waited for it): the socket leaves delayed-ACK mode before each read,
    where a plain socket settles in it after a few exchanges."""
    srv = ssh["servers"][0]
    kh = srv.known_hosts(ssh["key"].parent / f"known_hosts_nodelay_{srv.port}")
    with ParamikoSession(
        HostSpec("127.0.0.1", USER, srv.port), identity=str(ssh["key"]), known_hosts=str(kh), trust_new_host=False
    ) as board:
        sock = board.transport.sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert isinstance(sock, QuickAckSocket)
        quick = []
        for _ in range(10):
            assert board.run(["echo", "hi"])[1] == b"hi\n"
            quick.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK))
        assert any(quick), quick
