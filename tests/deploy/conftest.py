"""The deploy tests' boards and builds: real OpenSSH sshd instances on loopback (the board is a
--remote-root under tmp_path; sshd runs as, and logs in, the user running the tests: root is
not needed), the host-built q25tok, and three qemu builds. Shared by every
module here (package scope): sshd, the C build and three model builds happen once."""

from __future__ import annotations

from pathlib import Path

import pytest
from release_builds import shared_qemu_builds
from requirements import need_program
from sshd import SSHServer, keygen

VOCAB = Path(__file__).parents[1] / "data" / "ggml-vocab-qwen2.gguf"


@pytest.fixture(scope="package")
def ssh(tmp_path_factory):
    need_program("sshd", "Debian: openssh-server") if not Path("/usr/sbin/sshd").exists() else None
    need_program("ssh-keygen", "Debian: openssh-client")
    d = tmp_path_factory.mktemp("ssh")
    key = keygen(d / "client_ed25519")
    servers = [SSHServer(d / f"board{i}", key) for i in range(3)]
    yield {"dir": d, "key": key, "servers": servers}
    for s in servers:
        s.stop()


@pytest.fixture(scope="package")
def models(tmp_path_factory) -> dict[str, Path]:
    """Three builds for qemu: A, B (other weights, same vocabulary), C (another vocabulary)."""
    return shared_qemu_builds(tmp_path_factory)
