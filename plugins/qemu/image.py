"""What an initramfs that ``qemu up`` boots carries, for the commands it prints: whether the
board's ``q25tok`` is in it (else a deploy must send one: ``--runtime-bin``) and which of the
user's SSH keys its root accepts (``--identity``).

The initramfs is input like any other file: read as cpio "newc" archives (one after another,
as the kernel reads them; uncompressed or gzip), names and sizes bounded, never extracted."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

MAGICS = (b"070701", b"070702")  # newc, newc with checksums
HEADER = 110
TRAILER = "TRAILER!!!"
KEYS_FILE = "root/.ssh/authorized_keys"
MAX_KEYS_BYTES = 1 << 20
MAX_NAME = 4096


@dataclass(frozen=True)
class Contents:
    """What the image has: every path (no leading ``/`` or ``./``) and root's authorized keys."""

    names: frozenset[str]
    authorized_keys: bytes

    def has(self, path: str) -> bool:
        return path.lstrip("/") in self.names


def read_initramfs(path: Path) -> Contents | None:
    """The image's contents, or None when it is not a cpio archive this can read (compressed
    other than gzip: the caller then cannot say what it carries)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            data = gzip.decompress(f.read()) if head == b"\x1f\x8b" else f.read()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return parse_cpio(data)


def parse_cpio(data: bytes) -> Contents | None:
    names: set[str] = set()
    keys = b""
    pos = 0
    while pos < len(data):
        if data[pos] == 0:  # padding between concatenated archives
            pos += 1
            continue
        if data[pos : pos + 6] not in MAGICS or pos + HEADER > len(data):
            return None if not names else Contents(frozenset(names), keys)
        try:
            size = int(data[pos + 54 : pos + 62], 16)
            namesize = int(data[pos + 94 : pos + 102], 16)
        except ValueError:
            return None
        if not 0 < namesize <= MAX_NAME:
            return None
        name = data[pos + HEADER : pos + HEADER + namesize - 1].decode("utf-8", "replace")
        body = pos + _pad4(HEADER + namesize)
        end = body + size
        if end > len(data):
            return None
        clean = name.removeprefix("./").lstrip("/")
        if name != TRAILER:
            names.add(clean)
            if clean == KEYS_FILE and size <= MAX_KEYS_BYTES:
                keys = data[body:end]
        pos = pos + _pad4(end - pos)
    return Contents(frozenset(names), keys) if names else None


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def matching_identity(authorized_keys: bytes, ssh_dir: Path) -> Path | None:
    """The private key in ``ssh_dir`` whose public half (``NAME.pub``) the image authorizes."""
    wanted = set(authorized_keys.decode("utf-8", "replace").split())  # options, type, key, comment
    try:
        pubs = sorted(ssh_dir.glob("*.pub"))
    except OSError:
        return None
    for pub in pubs:
        try:
            words = pub.read_text(errors="replace").split()
        except OSError:
            continue
        private = pub.with_suffix("")
        if len(words) >= 2 and words[1] in wanted and private.is_file():  # the key itself (base64)
            return private
    return None
