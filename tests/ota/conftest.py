"""Fixtures of the OTA tests: builds, keys, the real tools (mender-artifact, swupdate,
busybox) and a directory of BusyBox applets that stands in for a board's userland."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from release_builds import shared_a2_build, shared_qemu_builds
from requirements import need_program
from shared_builds import runtime

VOCAB = Path(__file__).resolve().parent.parent / "data" / "ggml-vocab-qwen2.gguf"


@pytest.fixture(scope="session")
def ota_builds(tmp_path_factory) -> dict[str, Path]:
    """Builds for qemu: A, B (other weights, same vocabulary), C (another vocabulary), A2 (A's
    model with another image alignment: a new tokenizer image for the same model)."""
    out = shared_qemu_builds(tmp_path_factory)
    out["A2"] = shared_a2_build(tmp_path_factory)
    return out


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> dict[str, Path]:
    """RSA and ECDSA P-256 keys (PEM), their public keys, self-signed certificates."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("keys")
    out = {}
    for name, key in (
        ("rsa", rsa.generate_private_key(65537, 3072)),
        ("rsa2", rsa.generate_private_key(65537, 2048)),
        ("ec", ec.generate_private_key(ec.SECP256R1())),
    ):
        (d / f"{name}.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        (d / f"{name}.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"q25 test {name}")])
        now = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(1)
            .not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=36500))
            .sign(key, hashes.SHA256())
        )
        (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        for ext in ("pem", "pub", "crt"):
            out[f"{name}.{ext}"] = d / f"{name}.{ext}"
    return out


@pytest.fixture(scope="session")
def busybox_path(tmp_path_factory) -> str:
    """A PATH holding only BusyBox applets: the scripts run with nothing from the host."""
    bb = need_program("busybox", "Debian: busybox-static")
    d = tmp_path_factory.mktemp("busybox-bin")
    subprocess.run([bb, "--install", "-s", str(d)], check=True)
    return str(d)


@pytest.fixture(scope="session")
def bb(busybox_path) -> str:
    """``busybox_path``, by the name the board tests pass to their helpers."""
    return busybox_path


@pytest.fixture(scope="session")
def q25tok_bin(tmp_path_factory) -> Path:
    """The host's q25tok (the ``q25tok`` fixture's build; some OTA tests have a parameter of
    that name; tests/packer/test_runtime_build.py runs the ``runtime build`` command itself)."""
    need_program("cc", "Debian: gcc")
    return runtime(tmp_path_factory) / "q25tok"
