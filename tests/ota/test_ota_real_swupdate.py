"""Debian's SWUpdate (2022.12, ``swupdate -i``) installs our signed .swu (files handler and the
board script as preinst/postinst, the hardware revision of /etc/hwrevision) in a private mount
namespace (real_clients.py): one file mode; the script's progress logged as information, its
errors as errors; a failed smoke test rolled back; a tokenizer-only image on a board without a
release, a tampered payload, a wrong hardware revision and an unsigned image refused."""

from __future__ import annotations

import pytest
from ota_helpers import INSTALL, cpio_members, layout, package, resident
from real_clients import ClientBoard, break_q25tok, current_release, need_clients
from release_modes import wrong_modes


@pytest.fixture
def board(tmp_path, busybox_path, q25tok_bin, ota_builds):
    need_clients()
    return ClientBoard(
        tmp_path / "board",
        busybox_path=busybox_path,
        q25tok=q25tok_bin,
        hw_revision="qemu 1.0",
        reserving=(ota_builds["A"],),
    )


def signed(board, build, out, keys, *extra):
    """Signed, for the board file naming the board's stand-in device tree and memory."""
    return package(
        build,
        "swupdate",
        out,
        "--sign-key",
        str(keys["rsa.pem"]),
        "--sign-cert",
        str(keys["rsa.crt"]),
        "--target-file",
        str(board.board_file),
        *extra,
    )


def test_a_signed_swu_installs_with_one_mode_and_its_progress_is_information(tmp_path, board, ota_builds, keys):
    for build, extra in ((ota_builds["A"], ()), (ota_builds["A2"], ("--tokenizer-only",)), (ota_builds["B"], ())):
        r = board.swupdate(
            signed(board, build, tmp_path / f"{build.name}{''.join(extra)}.swu", keys, *extra), keys["rsa.crt"]
        )
        assert r.returncode == 0 and "SWUPDATE successful !" in r.stdout, r.stdout + r.stderr
        release = current_release(board.root)
        # SWUpdate logs a script's stdout as [TRACE] lines (shown with -v) and every line of its
        # stderr as "[ERROR] : SWUPDATE failed [0] ERROR : ...": a successful update logs no error
        assert "[ERROR]" not in r.stdout + r.stderr, r.stderr
        assert f"q25-ota: installed release {release.name}" in r.stdout
        assert f"q25-ota: smoke test passed on releases/{release.name}" in r.stdout
        assert wrong_modes(release) == {}  # the rawfile handler writes 0600: the script sets the release's modes
        assert not (board.root / INSTALL / ".q25-ota-incoming").exists()
        assert resident(board.memory, ota_builds["A" if build.name == "A2" else build.name])  # A2: A's regions kept
        assert "q25-ota: verify: the reserved regions hold" in r.stdout
        # the model ran from the release's partitions and agreed with the build's forward record
        # (a full release; a tokenizer-only one keeps the current release's weights)
        assert ("q25-ota: smoke: the forward pass agrees with the host's" in r.stdout) == (not extra)


def test_a_failed_smoke_test_is_an_error_and_rolls_back(tmp_path, board, ota_builds, keys):
    assert board.swupdate(signed(board, ota_builds["A"], tmp_path / "a.swu", keys), keys["rsa.crt"]).returncode == 0
    before = layout(board.root)
    break_q25tok(board.root)
    r = board.swupdate(signed(board, ota_builds["B"], tmp_path / "b.swu", keys), keys["rsa.crt"])
    assert r.returncode != 0 and "SWUPDATE successful" not in r.stdout
    errors = [line for line in r.stderr.splitlines() if line.startswith("[ERROR]")]
    assert any("board ids differ" in e for e in errors) and any("smoke test failed: rolled back" in e for e in errors)
    assert not any("installed release" in e or "rolled back to" in e for e in errors)  # progress, not errors
    assert layout(board.root) == before and resident(board.memory, ota_builds["A"])  # B loaded, then A again


def test_a_tampered_payload_a_wrong_hardware_revision_and_an_unsigned_swu_are_refused(
    tmp_path, board, ota_builds, keys
):
    tok = signed(board, ota_builds["A2"], tmp_path / "a2-tok.swu", keys, "--tokenizer-only")
    r = board.swupdate(tok, keys["rsa.crt"])  # no release on the board: the script refuses it
    assert r.returncode != 0 and "install a full release" in r.stderr, r.stderr
    assert [k for k, v in layout(board.root).items() if v[0] != "dir"] == []  # no payload left behind
    assert board.swupdate(signed(board, ota_builds["A"], tmp_path / "a.swu", keys), keys["rsa.crt"]).returncode == 0
    before = layout(board.root)
    swu = signed(board, ota_builds["B"], tmp_path / "b.swu", keys)
    data = bytearray(swu.read_bytes())
    off, _ = cpio_members(bytes(data))["tokenizer.q25tokrt"]
    data[off + 4096] ^= 1
    bad = tmp_path / "b-tampered.swu"
    bad.write_bytes(bytes(data))
    other = signed(board, ota_builds["B"], tmp_path / "b-rev2.swu", keys, "--hw-revision", "2.0")
    unsigned = package(ota_builds["B"], "swupdate", tmp_path / "b-unsigned.swu")
    for swu, why in (
        (bad, "HASH mismatch"),
        (other, "SW not compatible with hardware"),
        (unsigned, "instead of sw-description.sig"),
    ):
        r = board.swupdate(swu, keys["rsa.crt"])
        assert r.returncode != 0 and "SWUPDATE successful" not in r.stdout, r.stdout
        assert why.lower() in (r.stdout + r.stderr).lower(), (swu.name, r.stdout[-2000:] + r.stderr)
        assert layout(board.root) == before
