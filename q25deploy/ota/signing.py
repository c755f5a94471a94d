"""Signatures in each engine's own scheme (keys and certificates given as PEM paths).

Mender (mender-artifact's ``artifact/signer.go``): ``manifest.sig`` is the base64 of an RSA
PKCS#1 v1.5 / SHA-256 signature of ``manifest``, or for ECDSA P-256 the raw ``r || s``
(32 + 32 bytes, big-endian), not DER. ECDSA is signed deterministically (RFC 6979) when
the installed ``cryptography`` can, so a signed artifact is reproducible too; RSA PKCS#1
v1.5 always is.

SWUpdate: ``sw-description.sig`` is a detached CMS SignedData in DER over
``sw-description`` with the signer's certificate, as ``openssl cms -sign -binary -outform
DER -noattr`` makes it; written with cryptography's PKCS#7 builder (no openssl command on
the host, no temporary files holding the key). Without signed attributes there is no
signing time in it, so with an RSA key the same build gives the same ``.swu``.
"""

from __future__ import annotations

import base64
from pathlib import Path

from .plan import PackageError


def load_key(path: Path):
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        return load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as e:
        raise PackageError(f"{path}: cannot read the signing key: {e.strerror}") from None
    except (ValueError, TypeError) as e:
        raise PackageError(f"{path}: not an unencrypted PEM private key ({e})") from None


def mender_signature(manifest: bytes, key_path: Path) -> bytes:
    """The contents of ``manifest.sig``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    key = load_key(key_path)
    if isinstance(key, rsa.RSAPrivateKey):
        raw = key.sign(manifest, padding.PKCS1v15(), hashes.SHA256())
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.name != "secp256r1":
            raise PackageError(f"{key_path}: Mender supports ECDSA P-256 only, not {key.curve.name}")
        try:
            algorithm = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
        except TypeError:  # cryptography < 42
            algorithm = ec.ECDSA(hashes.SHA256())
        r, s = decode_dss_signature(key.sign(manifest, algorithm))
        raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        raise PackageError(f"{key_path}: Mender signs with RSA or ECDSA P-256 keys, not {type(key).__name__}")
    return base64.b64encode(raw)


def cms_signature(data: bytes, key_path: Path, cert_path: Path) -> bytes:
    """A detached CMS (PKCS#7) SignedData in DER over ``data``: ``sw-description.sig``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.serialization import pkcs7

    key = load_key(key_path)
    try:
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    except OSError as e:
        raise PackageError(f"{cert_path}: cannot read the certificate: {e.strerror}") from None
    except ValueError as e:
        raise PackageError(f"{cert_path}: not a PEM certificate ({e})") from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise PackageError(f"{cert_path}: the certificate is not for the key {key_path}")
    opts = [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Binary, pkcs7.PKCS7Options.NoAttributes]
    return (
        pkcs7.PKCS7SignatureBuilder()
        .set_data(data)
        .add_signer(cert, key, hashes.SHA256())
        .sign(serialization.Encoding.DER, opts)
    )
