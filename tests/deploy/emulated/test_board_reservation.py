"""One image, models of two sizes (issue 28): a board booted once with a fixed reservation
(``build --reserve``) takes tiny and tiny-untied by deploy and by OTA (the board script run as
the Mender client runs its update module), each resident afterwards (read back by QEMU from
outside the guest); after an OTA rollback the old release's partitions are back; a plan its
device tree cannot hold is refused with 0 bytes sent (deploy) or nothing staged (OTA); and a
power cut during an OTA load leaves a board whose boot service loads a complete release.

The tests share one boot (TCG is slow) and run in order; the install path is on an ext4 disk
and the layer's boot service (q25-regions) is in the image, so the power cut boots the same
disk again."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from board_checks import INSTALL, q25, resident
from requirements import need_program

from q25deploy.cli import main
from q25deploy.deploy.state.release import release_from_build
from q25deploy.model.synthetic import write_model
from q25deploy.ota.mender import payload_tar, read_members
from q25deploy.resources import OTA_SCRIPT as SCRIPT

VOCAB = Path(__file__).parents[2] / "data" / "ggml-vocab-qwen2.gguf"
MODULE = "/tmp/q25-release"  # the update module, as /usr/share/mender/modules/v3/q25-release
TREE = "/tmp/q25-tree"  # the file tree the Mender client gives the module


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sized")
    out = {}
    for preset, name, extra in (
        ("tiny", "small", ["--reserve", "256MiB"]),
        ("tiny-untied", "large", ["--reserve", "256MiB"]),
        ("tiny-untied", "own", []),
    ):
        if not (d / f"{preset}.gguf").exists():
            write_model(d / f"{preset}.gguf", preset, str(VOCAB))
        assert (
            main(["build", "--target", "qemu", "--model", str(d / f"{preset}.gguf"), "--out", str(d / name), *extra])
            == 0
        )
        out[name] = d / name
    return out


@pytest.fixture(scope="module")
def fixed(_boards, sized, q25tok_aarch64, tmp_path_factory):
    """The board with the 256 MiB reservation, the install path on a disk, q25tok in the image
    (/usr/bin, the plan's) and the boot service: booted once for this module."""
    import emulated_board as eb

    need_program("mkfs.ext4", "Debian: e2fsprogs")
    layer = sized["small"] / "meta-q25" / "recipes-q25"
    extra = {
        "etc/init.d/S20q25-regions": (layer / "q25-regions" / "files" / "q25-regions").read_bytes(),
        "usr/bin/q25tok": q25tok_aarch64.read_bytes(),
    }
    disk = eb.make_disk(tmp_path_factory.mktemp("fixed-disk") / "disk.img", 512)
    board = _boards("dropbear", sized["small"] / "reserved-memory.dtsi", disk=disk, extra_files=extra)
    board.boot_args = (disk, extra)  # type: ignore[attr-defined]
    yield board
    board.qemu.stop()


@pytest.fixture(scope="module")
def artifacts(sized, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fixed-artifacts")
    out = {}
    for name in ("small", "large", "own"):
        argv = ["package", "--target", "qemu", "--build", str(sized[name]), "--format", "mender"]
        assert main([*argv, "--out", str(d / f"{name}.mender")]) == 0
        out[name] = d / f"{name}.mender"
    return out


def mender_state(board, state: str) -> tuple[int, str]:
    """The update module in one Mender state on the board's file tree: (status, its messages)."""
    status, out, err = board.sh(f"{MODULE} {state} {TREE}", check=False, timeout=600)
    return status, out + err


def mender_tree(board, art: Path) -> None:
    """The module and the artifact's files on the board, laid out as the Mender client does."""
    board.put(MODULE, SCRIPT.read_bytes(), "0755")
    board.put(f"{TREE}.tar", payload_tar(read_members(art)))
    board.sh(f"rm -rf {TREE} && mkdir -p {TREE}/files {TREE}/tmp && tar -xf {TREE}.tar -C {TREE}/files")


def mender_update(board, art: Path, tmp_path: Path, *, before_commit=None) -> list[tuple[str, int, str]]:
    """ArtifactInstall, ArtifactCommit (ArtifactRollback when either fails), Cleanup."""
    mender_tree(board, art)
    runs = []
    for state in ("ArtifactInstall", "ArtifactCommit"):
        if state == "ArtifactCommit" and before_commit:
            before_commit()
        runs.append((state, *mender_state(board, state)))
        if runs[-1][1] != 0:
            runs.append(("ArtifactRollback", *mender_state(board, "ArtifactRollback")))
            break
    runs.append(("Cleanup", *mender_state(board, "Cleanup")))
    return runs


def current(board) -> str:
    return board.sh(f"readlink {INSTALL}/current")[1].strip().removeprefix("releases/")


def test_one_fixed_reservation_takes_two_model_sizes(fixed, sized, q25tok_aarch64, capsys, tmp_path):
    board = fixed
    for build in (sized["small"], sized["large"]):
        code, res = q25(capsys, board.q25("deploy", build, "--strict", "--runtime-bin", str(q25tok_aarch64)))
        assert code == 0 and res[0]["ok"] and res[0]["residency"]["state"] == "resident", res
        assert not res[0]["smoke"]["warnings"], res
        assert resident(board, build, tmp_path)  # read back by QEMU, outside the guest
        code, res = q25(capsys, board.q25("status", build))
        assert code == 0 and res[0]["reserved"] is True and res[0]["residency"] == "resident", res
    # tiny-untied sized to itself needs another region than the image reserves: refused, nothing sent
    code, res = q25(capsys, board.q25("deploy", sized["own"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 13 and not res[0]["ok"] and res[0]["bytes_sent"] == 0 and res[0]["files_sent"] == 0, res
    assert "does not reserve 1 of the build's 1 region(s)" in res[0]["error"]
    assert "reserved-memory.dtsi" in res[0]["error"]
    assert resident(board, sized["large"], tmp_path)  # what was loaded stays


def test_ota_installs_become_resident_and_a_rollback_loads_the_old_release(fixed, sized, artifacts, tmp_path):
    """After deploy left tiny-untied: small by OTA, resident; large by OTA with a bit of its
    region flipped before the commit: the commit's q25tok verify fails, ArtifactRollback
    loads small's partitions again; a plan the device tree cannot hold is refused, nothing
    staged."""
    import emulated_board as eb

    board = fixed
    runs = mender_update(board, artifacts["small"], tmp_path)
    assert all(status == 0 for _, status, _ in runs), runs
    assert "verify: the reserved regions hold" in runs[1][2]
    assert resident(board, sized["small"], tmp_path)
    small = current(board)

    r0 = json.loads((sized["large"] / "partition_map.json").read_text())["regions"][0]

    def flip() -> None:  # one bit of the loaded region changes (read and written from outside)
        assert resident(board, sized["large"], tmp_path)  # the install loaded large
        eb.monitor(board.qemu, f'pmemsave {r0["base"]:#x} 1 "{tmp_path / "b"}"')
        board.sh(f"devmem {r0['base']:#x} 8 {(tmp_path / 'b').read_bytes()[0] ^ 1:#x}")

    runs = mender_update(board, artifacts["large"], tmp_path, before_commit=flip)
    assert [(s, st) for s, st, _ in runs] == [
        ("ArtifactInstall", 0),
        ("ArtifactCommit", 1),
        ("ArtifactRollback", 0),
        ("Cleanup", 0),
    ], runs
    assert "MISMATCH" in runs[1][2] and f"rolled back to {small}" in runs[2][2]
    assert current(board) == small and resident(board, sized["small"], tmp_path)  # read back by QEMU

    runs = mender_update(board, artifacts["own"], tmp_path)
    assert runs[0][1] != 0 and "refusing release" in runs[0][2] and "nothing was staged" in runs[0][2], runs
    assert current(board) == small and resident(board, sized["small"], tmp_path)
    assert ".incoming-ota" not in board.sh(f"ls -A {INSTALL}/releases")[1]


def test_a_power_cut_during_an_ota_load_boots_into_a_complete_release(
    fixed, _boards, sized, artifacts, capsys, tmp_path
):
    """ArtifactInstall of large over small, QEMU killed (SIGKILL) while q25tok load runs; the
    same disk booted again: the boot service has loaded current's partitions (large: the switch
    comes before the load) and smoke --strict passes."""
    board = fixed
    mender_tree(board, artifacts["large"])
    # the install in the background; a line when q25tok load runs: `q25tok ota install` forks it,
    # so two q25tok processes (the fork comes after the switch)
    with board.client() as c:
        _, out, _ = c.exec_command(
            f"({MODULE} ArtifactInstall {TREE} > /dev/null 2>&1 &); i=0; "
            "while set -- $(pidof q25tok); [ $# -lt 2 ]; do i=$((i + 1)); [ $i -lt 100000 ] || exit 1; done; "
            "echo loading; sleep 600",
            timeout=600,
        )
        assert out.readline().strip() == "loading"
        os.kill(board.qemu.pid, signal.SIGKILL)  # the power cut
    board.qemu.stop()
    disk, extra = board.boot_args
    again = _boards("dropbear", sized["small"] / "reserved-memory.dtsi", disk=disk, extra_files=extra)
    try:
        assert current(again) == release_from_build(sized["large"]).id  # switched (and synced) before the load
        build = sized["large"]
        assert "q25-regions: region" in again.qemu.serial() and "loaded" in again.qemu.serial()
        assert resident(again, build, tmp_path)
        code, res = q25(capsys, again.q25("smoke", build, "--strict"))
        assert code == 0 and res[0]["smoke"]["ok"], res
    finally:
        again.qemu.stop()
