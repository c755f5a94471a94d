"""Helpers of the OTA tests: packaging through the CLI, running the real tools, reading cpio."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from q25deploy.cli import main


def package(build: Path, fmt: str, out: Path, *extra: str, target: str = "qemu") -> Path:
    assert main(["package", "--target", target, "--build", str(build), "--format", fmt, "--out", str(out),
                 *extra]) == 0
    return out


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)


def cpio_members(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (offset of the data, size) in a cpio newc archive."""
    out, pos = {}, 0
    while True:
        assert data[pos:pos + 6] == b"070701", f"bad cpio magic at {pos}"
        fields = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        size, namesize = fields[6], fields[11]
        name = data[pos + 110: pos + 110 + namesize - 1].decode()
        start = pos + 110 + namesize
        start += -start % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (start, size)
        pos = start + size
        pos += -pos % 4


def swupdate_check(swu: Path, cert: Path, tmp: Path, hw: str = "qemu:1.0") -> str:
    """``swupdate -c`` (check mode) on ``swu``: its messages (exit status is not telling)."""
    work = tmp / "swupdate-tmp"
    work.mkdir(exist_ok=True)
    r = run(["swupdate", "-v", "-c", "-i", str(swu), "-k", str(cert), "-H", hw],
            env={**os.environ, "TMPDIR": str(work)}, cwd=work)
    return r.stdout + r.stderr
