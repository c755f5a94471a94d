"""Debian's Mender client (3.4, standalone: ``mender install`` + ``mender commit``) installs our
signed artifacts through our update module in a private mount namespace (real_clients.py):
install and commit with one file mode, a tokenizer-only artifact refused on a device without a
release and installed after the full one, a smoke test failing in ArtifactCommit that makes the
client call ArtifactRollback, a tampered payload and a wrong device type refused."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, package, resident
from real_clients import ClientBoard, break_q25tok, current_release, need_clients, said
from release_modes import wrong_modes
from sparse_files import written

from q25deploy.ota.mender import payload_tar, read_members


@pytest.fixture
def board(tmp_path, busybox_path, q25tok_bin, keys, ota_builds):
    need_clients()
    return ClientBoard(
        tmp_path / "board",
        busybox_path=busybox_path,
        q25tok=q25tok_bin,
        artifact_verify_key=keys["rsa.pub"],
        reserving=(ota_builds["A"],),
    )


def signed(board: ClientBoard, build: Path, out: Path, keys, *extra: str) -> Path:
    """Signed, for the board file naming the board's stand-in device tree and memory."""
    return package(
        build, "mender", out, "--sign-key", str(keys["rsa.pem"]), "--target-file", str(board.board_file), *extra
    )


def installed(board: ClientBoard, art: Path) -> str:
    """``mender install`` then ``mender commit``, both succeeding: their log."""
    r = board.mender("install", str(art))
    assert r.returncode == 0, r.stdout + r.stderr
    c = board.mender("commit")
    assert c.returncode == 0, c.stdout + c.stderr
    return said(r) + said(c)


def test_install_commit_and_a_tokenizer_only_artifact_after_the_full_one(tmp_path, board, ota_builds, keys):
    tok = signed(board, ota_builds["A2"], tmp_path / "a2-tok.mender", keys, "--tokenizer-only")
    r = board.mender("install", str(tok))  # nothing provides q25.vocab_fingerprint yet
    assert r.returncode != 0 and 'Artifact dependency "q25.vocab_fingerprint" not satisfied' in said(r), said(r)
    assert layout(board.root) == {} and "q25.release" not in board.provides()

    log = installed(board, signed(board, ota_builds["A"], tmp_path / "a.mender", keys))
    assert "installed release" in log and "smoke test passed" in log
    release = current_release(board.root)
    assert board.provides()["q25.release"] == release.name
    assert wrong_modes(release) == {}  # the client's file tree is 0600: the module sets the release's modes
    assert not (board.root / INSTALL / ".q25-ota").exists()
    assert resident(board.memory, ota_builds["A"]) and "verify: the reserved regions hold" in log

    log = installed(board, tok)
    new = current_release(board.root)
    assert new != release and wrong_modes(new) == {} and "smoke test passed" in log
    assert "already hold the partitions" in log and resident(board.memory, ota_builds["A"])  # same table: kept
    state = json.loads((board.root / INSTALL / ".q25deploy-state.json").read_text())
    assert state["current"] == new.name and state["previous"] == release.name
    assert board.provides()["q25.vocab_fingerprint"] == state["releases"][new.name]["vocab_fingerprint"]


def test_a_failed_smoke_test_in_commit_makes_the_client_roll_back(tmp_path, board, ota_builds, keys):
    installed(board, signed(board, ota_builds["A"], tmp_path / "a.mender", keys))
    before, provides = layout(board.root), board.provides()
    break_q25tok(board.root)
    r = board.mender("install", str(signed(board, ota_builds["B"], tmp_path / "b.mender", keys)))
    assert r.returncode == 0, said(r)
    assert current_release(board.root).name != provides["q25.release"]  # B is current until the commit
    c = board.mender("commit")
    assert c.returncode != 0 and "board ids differ" in said(c), said(c)
    assert "rolled back to " + provides["q25.release"] in said(c)  # the client called ArtifactRollback
    assert layout(board.root) == before and board.provides() == provides
    assert resident(board.memory, ota_builds["A"])  # B's partitions were loaded at install: A's again


def test_a_plan_the_running_device_tree_does_not_reserve_is_refused(
    tmp_path, busybox_path, q25tok_bin, keys, ota_builds
):
    """A board whose device tree reserves no region: ArtifactInstall refuses the release before
    staging it, in one line; the client rolls back, nothing is installed or provided."""
    need_clients()
    board = ClientBoard(
        tmp_path / "bare", busybox_path=busybox_path, q25tok=q25tok_bin, artifact_verify_key=keys["rsa.pub"]
    )
    r = board.mender("install", str(signed(board, ota_builds["A"], tmp_path / "a.mender", keys)))
    assert r.returncode != 0 and "q25-ota: refusing release" in said(r), said(r)
    assert "does not reserve 1 of the release's 1 region(s)" in said(r) and "nothing was staged" in said(r)
    assert [k for k, v in layout(board.root).items() if v[0] != "dir"] == []
    assert "q25.release" not in board.provides() and not written(board.memory)


def tampered(art: Path, out: Path) -> Path:
    """``art`` with one byte of its tokenizer image changed (the manifest left as it was)."""
    members = read_members(art)
    with tarfile.open(fileobj=io.BytesIO(payload_tar(members)), mode="r:") as t:
        files = [(m, t.extractfile(m).read()) for m in t.getmembers()]  # type: ignore[union-attr]
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:") as t:
        for m, body in files:
            if m.name == "tokenizer.q25tokrt":
                body = body[:4096] + bytes([body[4096] ^ 1]) + body[4097:]
            t.addfile(m, io.BytesIO(body))
    if "data/0000.tar.gz" in members:
        members["data/0000.tar.gz"] = gzip.compress(data.getvalue(), mtime=0)
    else:
        members["data/0000.tar"] = data.getvalue()
    with tarfile.open(out, "w:") as t:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))
    return out


def test_a_tampered_payload_and_a_wrong_device_type_are_refused(tmp_path, board, ota_builds, keys):
    installed(board, signed(board, ota_builds["A"], tmp_path / "a.mender", keys))
    before, provides = layout(board.root), board.provides()
    b = signed(board, ota_builds["B"], tmp_path / "b.mender", keys)
    r = board.mender("install", str(tampered(b, tmp_path / "b-tampered.mender")))
    assert r.returncode != 0 and "checksum" in said(r).lower(), said(r)
    assert layout(board.root) == before and board.provides() == provides
    other = signed(board, ota_builds["B"], tmp_path / "b-other.mender", keys, "--device-type", "kv260")
    r = board.mender("install", str(other))
    assert r.returncode != 0 and "kv260" in said(r), said(r)
    assert layout(board.root) == before and board.provides() == provides
    unsigned = package(ota_builds["B"], "mender", tmp_path / "b-unsigned.mender")
    r = board.mender("install", str(unsigned))
    assert r.returncode != 0 and layout(board.root) == before
