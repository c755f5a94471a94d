"""Mender artifacts checked by the real mender-artifact (Debian): validate, read, signatures,
tampering, device types, provides/depends, reproducibility."""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest
from ota_helpers import package, run
from requirements import need_program

from q25deploy.cli import main
from q25deploy.ota.mender import payload_tar, read_members


@pytest.fixture(scope="module")
def mender_artifact():
    return need_program("mender-artifact", "Debian: mender-artifact")


def manifest_digests(build) -> dict[str, str]:
    return {a["path"]: a["sha256"] for a in json.loads((build / "manifest.json").read_text())["artifacts"]}


def test_full_release_validates_and_reads_back(tmp_path, mender_artifact, ota_builds):
    art = package(ota_builds["A"], "mender", tmp_path / "a.mender")
    r = run([mender_artifact, "validate", str(art)])
    assert r.returncode == 0 and "validated successfully" in r.stdout + r.stderr, r.stderr
    r = run([mender_artifact, "read", str(art)])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    release = json.loads(read_members(art)["manifest"] and _payload(art, "release.json"))["id"]
    assert f"Name: q25-qemu-release-{release}" in out
    assert "Compatible devices: '[qemuarm64]'" in out  # targets/qemu.toml [ota] mender_device_type
    assert "Type:   q25-release" in out
    assert f"q25.release: {release}" in out and "q25.target: qemu" in out
    assert "Depends: Nothing" in out and 'Clears Provides: ["q25.*"]' in out
    digests = manifest_digests(ota_builds["A"])
    for name, rel in (
        ("tokenizer.q25tokrt", "tokenizer/tokenizer.q25tokrt"),
        ("partition_map.json", "partition_map.json"),
    ):
        block = out.split(f"name:     {name}\n", 1)[1].split("name:", 1)[0]
        assert f"checksum: {digests[rel]}" in block
    parts = [p for p in digests if p.startswith("partitions/")]
    assert parts and all(f"name:     {p.replace('/', '__')}" in out for p in parts)


def _payload(art, name: str) -> bytes:
    data = tarfile.open(fileobj=io.BytesIO(payload_tar(read_members(art))), mode="r:")
    return data.extractfile(name).read()


def test_device_type_override_and_tokenizer_only_depends(tmp_path, mender_artifact, ota_builds):
    art = package(
        ota_builds["A"],
        "mender",
        tmp_path / "t.mender",
        "--tokenizer-only",
        "--device-type",
        "k26-smk-kv",
        "--device-type",
        "my-board",
    )
    r = run([mender_artifact, "read", str(art)])
    assert r.returncode == 0, r.stderr
    fp = json.loads((ota_builds["A"] / "build.json").read_text())["image"]["vocab_fingerprint"]
    assert "Compatible devices: '[k26-smk-kv my-board]'" in r.stdout
    provides, depends = r.stdout.split("Provides:", 1)[1].split("Depends:", 1)
    assert f"q25.vocab_fingerprint: {fp}" in provides and f"q25.vocab_fingerprint: {fp}" in depends.split("Clears")[0]
    names = {line.split()[-1] for line in r.stdout.splitlines() if line.strip().startswith("name:")}
    assert "tokenizer.q25tokrt" in names and not any(n.startswith("partitions") for n in names)
    assert run([mender_artifact, "validate", str(art)]).returncode == 0


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_signed_artifact_verifies_and_tampering_fails(tmp_path, mender_artifact, ota_builds, keys, kind):
    art = package(ota_builds["A"], "mender", tmp_path / "s.mender", "--sign-key", str(keys[f"{kind}.pem"]))
    r = run([mender_artifact, "validate", "-k", str(keys[f"{kind}.pub"]), str(art)])
    assert r.returncode == 0, r.stderr
    r = run([mender_artifact, "read", "-k", str(keys[f"{kind}.pub"]), str(art)])
    assert "Signature: signed and verified correctly" in r.stdout
    other = "ec" if kind == "rsa" else "rsa"
    assert run([mender_artifact, "validate", "-k", str(keys[f"{other}.pub"]), str(art)]).returncode != 0
    # the attacker's version: another image, its digest put into the manifest, the old signature
    bad = tmp_path / "tampered.mender"
    bad.write_bytes(flip_image_byte(read_members(art), fix_manifest=True))
    r = run([mender_artifact, "validate", "-k", str(keys[f"{kind}.pub"]), str(bad)])
    assert r.returncode != 0 and re.search(r"verification (error|failed)", r.stdout + r.stderr), r.stdout + r.stderr


def flip_image_byte(members: dict[str, bytes], fix_manifest: bool) -> bytes:
    """The artifact with one byte of the tokenizer image flipped (and, with ``fix_manifest``,
    the manifest's digest of it updated)."""
    import hashlib

    inner = tarfile.open(fileobj=io.BytesIO(payload_tar(members)), mode="r:")
    data_name = next(n for n in members if n.startswith("data/0000"))
    buf = io.BytesIO()
    manifest = members["manifest"]
    with tarfile.open(fileobj=buf, mode="w:gz" if data_name.endswith(".gz") else "w:") as out:
        for m in inner.getmembers():
            body = bytearray(inner.extractfile(m).read())
            if m.name == "tokenizer.q25tokrt":
                old = hashlib.sha256(body).hexdigest().encode()
                body[4096] ^= 0xFF
                if fix_manifest:
                    manifest = manifest.replace(old, hashlib.sha256(body).hexdigest().encode())
            out.addfile(m, io.BytesIO(bytes(body)))
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, body in members.items():
            body = {data_name: buf.getvalue(), "manifest": manifest}.get(name, body)
            info = tarfile.TarInfo(name)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))
    return outer.getvalue()


def test_a_changed_payload_fails_validation(tmp_path, mender_artifact, ota_builds):
    art = package(ota_builds["A"], "mender", tmp_path / "a.mender")
    bad = tmp_path / "bad.mender"
    bad.write_bytes(flip_image_byte(read_members(art), fix_manifest=False))
    r = run([mender_artifact, "validate", str(bad)])
    assert r.returncode != 0 and "checksum" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr


@pytest.mark.parametrize(
    ("extra", "compressed"),
    [
        ((), False),
        (("--tokenizer-only",), True),
        (("--compression", "gzip"), True),
        (("--tokenizer-only", "--compression", "none"), False),
    ],
)
def test_payload_compression_as_mender_artifact_names_it(tmp_path, mender_artifact, ota_builds, extra, compressed):
    """A full release's payload is stored (quant blocks do not compress), a tokenizer-only one is
    gzipped, --compression says otherwise; mender-artifact reads either and the files are the same."""
    art = package(ota_builds["A"], "mender", tmp_path / "a.mender", *extra)
    members = read_members(art)
    suffix = ".tar.gz" if compressed else ".tar"
    assert {"header" + suffix, "data/0000" + suffix} <= set(members), sorted(members)
    assert not any(n.startswith(("header.", "data/")) and not n.endswith(suffix) for n in members), sorted(members)
    assert f"header{suffix}" in members["manifest"].decode()
    assert run([mender_artifact, "validate", str(art)]).returncode == 0
    image = (ota_builds["A"] / "tokenizer").glob("*.q25tokrt")
    assert _payload(art, "tokenizer.q25tokrt") == next(image).read_bytes()


def test_compression_is_a_mender_option(tmp_path, capsys, ota_builds):
    rc = main(["package", "--target", "qemu", "--build", str(ota_builds["A"]), "--format", "swupdate",
               "--compression", "none", "--out", str(tmp_path / "a.swu")])  # fmt: skip
    assert rc == 2 and "--compression is for --format mender" in capsys.readouterr().err
    assert not (tmp_path / "a.swu").exists()


def test_reproducible(tmp_path, ota_builds, keys):
    for extra in ((), ("--sign-key", str(keys["rsa.pem"])), ("--sign-key", str(keys["ec.pem"])), ("--tokenizer-only",)):
        a = package(ota_builds["A"], "mender", tmp_path / "1.mender", *extra)
        first = a.read_bytes()
        b = package(ota_builds["A"], "mender", tmp_path / "2.mender", *extra)
        assert first == b.read_bytes(), extra


def test_refuses_unsafe_build_contents(tmp_path, capsys, ota_builds):
    import shutil

    build = tmp_path / "build"
    shutil.copytree(ota_builds["A"], build, symlinks=True)
    manifest = json.loads((build / "manifest.json").read_text())
    for a in manifest["artifacts"]:
        if a["path"].startswith("partitions/"):
            a["path"] = "partitions/../../../etc/passwd"
            break
    (build / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert (
        main(
            [
                "package",
                "--target",
                "qemu",
                "--build",
                str(build),
                "--format",
                "mender",
                "--out",
                str(tmp_path / "x.mender"),
            ]
        )
        != 0
    )
    err = capsys.readouterr().err
    assert err.startswith("q25deploy: error:") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.mender").exists() and not list(tmp_path.glob(".x.mender*"))

    shutil.rmtree(build)
    shutil.copytree(ota_builds["A"], build, symlinks=True)
    (build / "partition_map.json").write_bytes((build / "partition_map.json").read_bytes() + b" ")
    assert (
        main(
            [
                "package",
                "--target",
                "qemu",
                "--build",
                str(build),
                "--format",
                "swupdate",
                "--out",
                str(tmp_path / "x.swu"),
            ]
        )
        != 0
    )
    assert "differs from the build manifest" in capsys.readouterr().err
