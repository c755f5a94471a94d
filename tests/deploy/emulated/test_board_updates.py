"""Updates on the emulated board: tokenizer-only updates (a new image of the same vocabulary,
the image of another model with that vocabulary — issue 11, defect 1 — and a foreign one,
refused) leave the partitions and the reserved regions alone; an upload cut halfway leaves
the board as it was, and the next deploy completes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from board_checks import INSTALL, fresh, q25, resident
from board_fixtures import wait_until
from emulated_board import known_hosts_line
from sshd import CuttingProxy

IMAGE = "tokenizer/tokenizer.q25tokrt"
IMAGE_MANIFEST = "tokenizer/tokenizer_runtime_image_manifest.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def board_files(board) -> dict[str, str]:
    """sha256 of every file of the current release on the board."""
    out = board.sh(f"cd {INSTALL}/current && find . -type f | sort | xargs sha256sum")[1]
    return {name[2:]: digest for digest, name in (ln.split() for ln in out.splitlines())}


def settled(board) -> dict[str, str]:
    """What says where the board is: the state file, the current link, the kept releases."""
    return {
        "state": board.sh(f"cat {INSTALL}/.q25deploy-state.json")[1],
        "current": board.sh(f"readlink {INSTALL}/current")[1],
        "releases": board.sh(f"ls {INSTALL}/releases")[1],
    }


def test_tokenizer_only_updates_leave_the_partitions_alone(
    board, builds, build_a2, build_b, build_c, q25tok_aarch64, capsys, tmp_path
):
    fresh(board)
    a = builds["qemu"]
    code, res = q25(capsys, board.q25("deploy", a, "--strict", "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0, res[0]["error"]
    before = board_files(board)
    partitions = {k: v for k, v in before.items() if k.startswith("partitions/")}
    # a new image of the same vocabulary: only the image and its manifest travel
    code, res = q25(capsys, board.q25("deploy", build_a2, "--tokenizer-only", "--strict"))
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], res[0]["error"]
    assert sha256(build_a2 / IMAGE) != sha256(a / IMAGE)
    assert res[0]["bytes_sent"] == (build_a2 / IMAGE).stat().st_size + (build_a2 / IMAGE_MANIFEST).stat().st_size
    after = board_files(board)
    assert after["tokenizer.q25tokrt"] == sha256(build_a2 / IMAGE)
    assert {k: v for k, v in after.items() if k.startswith("partitions/")} == partitions and after["q25tok"] == before[
        "q25tok"
    ]
    assert resident(board, a, tmp_path)  # the regions hold A's partitions as before
    # defect 1: the image of another model with the same vocabulary; the smoke test checks
    # the board's partitions against the board's own release, not B's partition map
    code, res = q25(capsys, board.q25("deploy", build_b, "--tokenizer-only", "--strict"))
    assert code == 0 and res[0]["ok"] and not res[0]["rolled_back"] and res[0]["smoke"]["ok"], res[0]["error"]
    assert {k: v for k, v in board_files(board).items() if k.startswith("partitions/")} == partitions
    assert resident(board, a, tmp_path) and not resident(board, build_b, tmp_path)
    code, res = q25(capsys, board.q25("smoke", build_b, "--strict"))
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], res[0]["error"]
    # a foreign vocabulary: refused, nothing changes
    where = settled(board)
    code, res = q25(capsys, board.q25("deploy", build_c, "--tokenizer-only"))
    assert code == 13 and "vocabulary fingerprint" in res[0]["error"] and res[0]["bytes_sent"] == 0
    assert settled(board) == where
    code, res = q25(capsys, board.q25("smoke", build_c))
    assert code == 13 and "another vocabulary" in res[0]["error"]


def test_an_upload_cut_halfway_leaves_the_board_as_it_was(board, builds, build_b, q25tok_aarch64, capsys, tmp_path):
    """A relay on 127.0.0.1 between paramiko and QEMU's forwarded port cuts the connection
    once 3 MiB have gone to the board: halfway through B's 5 MiB partition."""
    fresh(board)
    a, rt = builds["qemu"], str(q25tok_aarch64)
    code, res = q25(capsys, board.q25("deploy", a, "--runtime-bin", rt))
    assert code == 0, res[0]["error"]
    where = settled(board)
    proxy = CuttingProxy(board.port, limit=3 << 20)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(known_hosts_line(proxy.port) + "\n")
    argv = board.q25("deploy", build_b, "--runtime-bin", rt)
    argv[argv.index(board.host)] = f"root@127.0.0.1:{proxy.port}"
    argv[argv.index(str(board.known_hosts))] = str(known_hosts)
    try:
        code, res = q25(capsys, argv)
    finally:
        proxy.close()
    assert proxy.cut.is_set() and code == 13 and "connection lost while uploading" in res[0]["error"], res[0]
    # the board sees the connection end: its lock goes, and nothing else changed
    assert wait_until(lambda: board.sh(f"test -L {INSTALL}/.q25deploy.lock", check=False)[0] != 0, 60)
    assert settled(board) == where
    assert resident(board, a, tmp_path)
    code, res = q25(capsys, board.q25("smoke", a))
    assert code == 0 and res[0]["smoke"]["ok"], res[0]["error"]
    code, res = q25(capsys, board.q25("deploy", build_b, "--runtime-bin", rt))
    assert code == 0 and res[0]["ok"] and res[0]["previous"] == where["current"].strip().split("/")[1], res[0]
    assert board.sh(f"ls -a {INSTALL}/releases")[1].count(".incoming-") == 0  # what the cut left is gone
    assert resident(board, build_b, tmp_path)
