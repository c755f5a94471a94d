"""SWUpdate images checked by Debian's swupdate in check mode (-c), which accepts signed
images only: success, a flipped payload byte, another signer, another hardware revision,
and the cpio layout and reproducibility."""

from __future__ import annotations

import json
import re

import pytest
from ota_helpers import cpio_members, package, swupdate_check
from requirements import need_program

from q25deploy.cli import main


@pytest.fixture(scope="module")
def swupdate():
    return need_program("swupdate", "Debian: swupdate")


@pytest.fixture(scope="module")
def signed_swu(tmp_path_factory, ota_builds, keys):
    d = tmp_path_factory.mktemp("swu")
    return package(
        ota_builds["A"],
        "swupdate",
        d / "a.swu",
        "--sign-key",
        str(keys["rsa.pem"]),
        "--sign-cert",
        str(keys["rsa.crt"]),
    )


def test_layout_sw_description_first(signed_swu, ota_builds):
    data = signed_swu.read_bytes()
    names = list(cpio_members(data))
    assert names[:3] == ["sw-description", "sw-description.sig", "q25-ota.sh"]
    off, size = cpio_members(data)["sw-description"]
    desc = data[off : off + size].decode()
    digests = {a["path"]: a["sha256"] for a in json.loads((ota_builds["A"] / "manifest.json").read_text())["artifacts"]}
    assert f'sha256 = "{digests["tokenizer/tokenizer.q25tokrt"]}";' in desc
    assert '\tqemu =\n\t{\n\t\thardware-compatibility: [ "1.0" ];' in desc  # the board section (hwrevision name)
    assert desc.count("filename =") == len(names) - 2  # every file but the description and its signature
    assert '"/lib/firmware/q25/.q25-ota-incoming/tokenizer.q25tokrt"' in desc


def test_check_mode_accepts_the_signed_image(tmp_path, swupdate, signed_swu, keys):
    out = swupdate_check(signed_swu, keys["rsa.crt"], tmp_path)
    assert "Verified OK" in out and "Hardware compatibility verified" in out
    assert "SWUPDATE successful" in out and "ERROR" not in out, out[-3000:]


def test_flipped_payload_byte_is_a_hash_mismatch(tmp_path, swupdate, signed_swu, keys):
    data = bytearray(signed_swu.read_bytes())
    off, size = cpio_members(bytes(data))["tokenizer.q25tokrt"]
    data[off + size // 2] ^= 0x01
    bad = tmp_path / "bad.swu"
    bad.write_bytes(bytes(data))
    out = swupdate_check(bad, keys["rsa.crt"], tmp_path)
    assert "HASH mismatch" in out and "SWUPDATE successful" not in out


def test_another_signer_is_refused(tmp_path, swupdate, ota_builds, keys, signed_swu):
    other = package(
        ota_builds["A"],
        "swupdate",
        tmp_path / "o.swu",
        "--sign-key",
        str(keys["rsa2.pem"]),
        "--sign-cert",
        str(keys["rsa2.crt"]),
    )
    out = swupdate_check(other, keys["rsa.crt"], tmp_path)
    assert "Authentication of all signatures failed" in out and "SWUPDATE successful" not in out
    out = swupdate_check(signed_swu, keys["rsa2.crt"], tmp_path)
    assert "Authentication of all signatures failed" in out and "SWUPDATE successful" not in out


def test_unsigned_and_other_hardware_are_refused(tmp_path, swupdate, ota_builds, keys, signed_swu):
    out = swupdate_check(signed_swu, keys["rsa.crt"], tmp_path, hw="qemu:2.0")
    assert "SW not compatible with hardware" in out and "SWUPDATE successful" not in out
    unsigned = package(ota_builds["A"], "swupdate", tmp_path / "u.swu")
    assert "SWUPDATE successful" not in swupdate_check(unsigned, keys["rsa.crt"], tmp_path)
    ok = package(
        ota_builds["A"],
        "swupdate",
        tmp_path / "r2.swu",
        "--hw-revision",
        "2.0",
        "--hw-revision",
        "2.1",
        "--sign-key",
        str(keys["rsa.pem"]),
        "--sign-cert",
        str(keys["rsa.crt"]),
    )
    assert "SWUPDATE successful" in swupdate_check(ok, keys["rsa.crt"], tmp_path, hw="qemu:2.1")


def test_reproducible_and_key_checks(tmp_path, capsys, ota_builds, keys, signed_swu):
    again = package(
        ota_builds["A"],
        "swupdate",
        tmp_path / "again.swu",
        "--sign-key",
        str(keys["rsa.pem"]),
        "--sign-cert",
        str(keys["rsa.crt"]),
    )
    assert again.read_bytes() == signed_swu.read_bytes()
    a = package(ota_builds["A"], "swupdate", tmp_path / "t1.swu", "--tokenizer-only").read_bytes()
    assert a == package(ota_builds["A"], "swupdate", tmp_path / "t2.swu", "--tokenizer-only").read_bytes()
    base = [
        "package",
        "--target",
        "qemu",
        "--build",
        str(ota_builds["A"]),
        "--format",
        "swupdate",
        "--out",
        str(tmp_path / "x.swu"),
    ]
    capsys.readouterr()
    assert main([*base, "--sign-key", str(keys["rsa.pem"])]) == 2  # a CMS signature needs the certificate
    assert main([*base, "--sign-key", str(keys["rsa.pem"]), "--sign-cert", str(keys["ec.crt"])]) == 1
    assert "not for the key" in capsys.readouterr().err
    assert not (tmp_path / "x.swu").exists()


def test_the_version_and_compatibility_a_server_matches_are_printed_and_settable(
    tmp_path, capsys, swupdate, ota_builds, keys
):
    argv = ["package", "--target", "qemu", "--build", str(ota_builds["A"]), "--format", "swupdate"]
    signing = ["--sign-key", str(keys["rsa.pem"]), "--sign-cert", str(keys["rsa.crt"])]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "d.swu"), *signing]) == 0
    said = capsys.readouterr().out
    release = re.search(r"artifact q25-qemu-release-([0-9a-f]{16}) ", said).group(1)
    assert f"version 1.0.0+{release} (--sw-version sets it)" in said
    assert "hardware-compatibility qemu 1.0 (the board file's name" in said and "--hw-revision" in said
    out = tmp_path / "v.swu"
    assert main([*argv, "--out", str(out), "--sw-version", "2.3.4", "--hw-revision", "1.1", "--json", *signing]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == "2.3.4"
    assert info["hardware_compatibility"] == {"board": "qemu", "revisions": ["1.1"]}
    off, size = cpio_members(out.read_bytes())["sw-description"]
    assert '\tversion = "2.3.4";' in out.read_bytes()[off : off + size].decode()
    assert "SWUPDATE successful" in swupdate_check(out, keys["rsa.crt"], tmp_path, hw="qemu:1.1")
    # another board name with the same revision: SWUpdate finds no section for it
    assert "SWUPDATE successful" not in swupdate_check(out, keys["rsa.crt"], tmp_path, hw="zcu104:1.1")
    assert main([*argv, "--out", str(tmp_path / "b.swu"), "--sw-version", "2.0 beta"]) == 1
    assert "SWUpdate version: '2.0 beta' is not a plain name" in capsys.readouterr().err
    mender = ["package", "--target", "qemu", "--build", str(ota_builds["A"]), "--format", "mender"]
    assert main([*mender, "--out", str(tmp_path / "m.mender"), "--sw-version", "2.0"]) == 2
    assert not (tmp_path / "b.swu").exists() and not (tmp_path / "m.mender").exists()
