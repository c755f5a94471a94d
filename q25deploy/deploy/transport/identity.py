"""``--identity KEY``: the local mistakes found before any board is contacted, and the words for a
key a board refuses. Pure reading of local files (and ``ssh-add -L`` for an encrypted key).

A path that is missing, a directory, unreadable, a public key, not a private key at all, or an
encrypted key no ssh-agent holds is a usage error (exit 2) whose one line names the fix; a key
the board refuses is that board's failure, naming the user and the key (:func:`refused`).
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import subprocess
from pathlib import Path

from ...errors import DeployError, UsageError
from .hosts import HostSpec

__all__ = ["check_identity", "encrypted", "refused"]

_OPENSSH = b"-----BEGIN OPENSSH PRIVATE KEY-----"
_PEM_PRIVATE = (
    b"-----BEGIN RSA PRIVATE KEY-----",
    b"-----BEGIN EC PRIVATE KEY-----",
    b"-----BEGIN DSA PRIVATE KEY-----",
)
_PKCS8 = b"-----BEGIN PRIVATE KEY-----"
_PKCS8_ENCRYPTED = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"
_PUBLIC = (b"ssh-", b"ecdsa-sha2-", b"sk-ssh-", b"sk-ecdsa-", b"-----BEGIN SSH2 PUBLIC KEY-----")
_MAX_KEY = 1 << 20  # no private key file is larger


def check_identity(key: str | None) -> None:
    """Refuse (:class:`UsageError`) a ``--identity`` that cannot log in anywhere, naming the fix."""
    if not key:
        return
    path = Path(key).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        pub = (
            f" (there is {key}.pub: pass the private key, {key} without .pub, once it exists)"
            if Path(f"{path}.pub").exists()
            else ""
        )
        raise UsageError(f"--identity {key}: no such key file{pub}: give the path of your SSH private key") from None
    except OSError as e:
        raise UsageError(
            f"--identity {key}: cannot read it ({e.strerror}): give the path of your SSH private key"
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(
            f"--identity {key}: is a directory: give the private key file in it (e.g. {key.rstrip('/')}/id_ed25519)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--identity {key}: is not a regular file: give the path of your SSH private key")
    try:
        with open(path, "rb") as f:
            head = f.read(_MAX_KEY)
    except OSError as e:
        raise UsageError(
            f"--identity {key}: cannot read it ({e.strerror}): make it readable by you (chmod 600 {key})"
        ) from None
    text = head.lstrip()
    if key.endswith(".pub") or text.startswith(_PUBLIC):
        private = key[: -len(".pub")] if key.endswith(".pub") else "its private key"
        raise UsageError(f"--identity {key}: that is the public key; pass the private key {private} without .pub")
    encrypted = _encrypted(text)
    if encrypted is None:
        raise UsageError(
            f"--identity {key}: not an SSH private key (no OpenSSH or PEM private key in it): "
            "give the private key ssh-keygen wrote (e.g. ~/.ssh/id_ed25519)"
        )
    if encrypted and not _in_agent(path, text):
        raise UsageError(
            f"--identity {key}: {key} is encrypted: add it to ssh-agent (`ssh-add {key}`) or use an unencrypted deploy key"
        )


def encrypted(key: str) -> bool:
    """Whether the key file ``key`` is encrypted: only an ssh-agent holding it can use it (the
    check above let it through only so), and the login must then ask the agent."""
    try:
        with open(Path(key).expanduser(), "rb") as f:
            return bool(_encrypted(f.read(_MAX_KEY).lstrip()))
    except OSError:
        return False


def refused(spec: HostSpec, key: str | None, said: str = "publickey") -> DeployError:
    """The board's refusal of the login: the user, the key, and how to make the board take it."""
    user = spec.user or "root"
    if key:
        return DeployError(
            f"{spec.name}: {user}@{spec.host} refused the key {key} ({said}): add {key}.pub to "
            f"~{user}/.ssh/authorized_keys on the board, or pass --identity with the key it has (or --host USER@HOST for another user)"
        )
    return DeployError(
        f"{spec.name}: {user}@{spec.host} refused every key of ssh-agent and ~/.ssh ({said}): pass "
        f"--identity KEY whose KEY.pub is in ~{user}/.ssh/authorized_keys on the board (or --host USER@HOST for another user)"
    )


def _encrypted(text: bytes) -> bool | None:
    """Whether the private key ``text`` is encrypted; None: it is no private key."""
    if text.startswith(_OPENSSH):
        blob = _openssh_blob(text)
        if blob is None or not blob.startswith(b"openssh-key-v1\0"):
            return None
        n = int.from_bytes(blob[15:19], "big")
        return blob[19 : 19 + n] != b"none"
    if text.startswith(_PKCS8_ENCRYPTED):
        return True
    if text.startswith(_PEM_PRIVATE):
        return b"Proc-Type: 4,ENCRYPTED" in text.split(b"-----END", 1)[0]
    if text.startswith(_PKCS8):
        return False
    if text.startswith(b"PuTTY-User-Key-File-"):
        return None  # ssh and paramiko read neither: puttygen -O private-openssh converts it
    return None


def _openssh_blob(text: bytes) -> bytes | None:
    body = text.split(b"-----END", 1)[0].split(b"\n", 1)[-1]
    try:
        return base64.b64decode(b"".join(body.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def _public_blob(path: Path, text: bytes) -> bytes | None:
    """The public key of the private key at ``path``: from an OpenSSH key's header (not encrypted),
    else from ``path.pub``."""
    if text.startswith(_OPENSSH):
        blob = _openssh_blob(text) or b""
        off = 15
        for _ in range(3):  # cipher, kdf, kdf options
            off += 4 + int.from_bytes(blob[off : off + 4], "big")
        off += 4  # number of keys
        n = int.from_bytes(blob[off : off + 4], "big")
        if n and off + 4 + n <= len(blob):
            return blob[off + 4 : off + 4 + n]
    try:
        fields = Path(f"{path}.pub").read_text().split()
        return base64.b64decode(fields[1])
    except (OSError, IndexError, ValueError, binascii.Error):
        return None


def _in_agent(path: Path, text: bytes) -> bool:
    """Whether the running ssh-agent (``$SSH_AUTH_SOCK``) holds this key."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        return False
    blob = _public_blob(path, text)
    if blob is None:
        return False
    try:
        out = subprocess.run(["ssh-add", "-L"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    for line in out.split(b"\n"):
        fields = line.split()
        if len(fields) >= 2:
            try:
                if base64.b64decode(fields[1]) == blob:
                    return True
            except (ValueError, binascii.Error):
                continue
    return False
