"""What a deploy, smoke, status or rollback run was asked (:class:`Options`) and the boards it
goes to: light to import, so the command can start logging in to the boards before it loads
the rest (see :func:`q25deploy.deploy.transport.sshboard.begin_login`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import DeployError, UsageError
from ..transport.hosts import HostSpec, parse_host


@dataclass
class Options:
    hosts: list[str]
    hosts_file: str | None
    build_dir: Path | None  # smoke and status work from the board's own release without one
    identity: str | None
    known_hosts: str | None
    trust_new_host: bool
    remote_root: str
    runtime_bin: str | None
    jobs: int
    tokenizer_only: bool = False
    strict: bool = False
    quick: bool = False  # smoke: skip the partition hashes
    forward_prompts: int | None = 1  # smoke: the forward pass on the record's first N prompts (None: all)
    verify_board: bool = False  # deploy: hash the board's kept files too, send again what differs
    become: str | None = None  # --become: overrides the board file's [ssh] become
    transfer: str = "auto"  # deploy --transfer: large files through OpenSSH's ssh (auto, openssh) or paramiko
    allow_unreserved: bool = False  # deploy: send a plan the board's device tree does not reserve (a warning)
    verify_regions: bool = False  # status --verify: read the regions back whatever this boot's load record says


#: the most a hosts file may hold (a few thousand boards' lines)
MAX_HOSTS_FILE = 1 << 20
#: each hosts file this program read (path → its lines): read once, so that a pipe
#: (``--hosts-file <(...)``, ``/dev/stdin``) gives the logins started ahead of the fleet and the
#: fleet the same boards; :func:`forget_hosts_files` empties it when the command ends
_HOSTS_FILES: dict[str, list[str]] = {}


def hosts_file_lines(path: str) -> list[str]:
    """The hosts named in ``path`` (comments and blank lines dropped), read once per command."""
    if path not in _HOSTS_FILES:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_HOSTS_FILE + 1)
        except OSError as e:
            raise DeployError(f"{path}: cannot read: {e.strerror}") from None
        if len(data) > MAX_HOSTS_FILE:
            raise UsageError(f"--hosts-file {path}: larger than {MAX_HOSTS_FILE:,} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"--hosts-file {path}: not UTF-8 text") from None
        lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        _HOSTS_FILES[path] = [line for line in lines if line]
    return _HOSTS_FILES[path]


def forget_hosts_files() -> None:
    _HOSTS_FILES.clear()


def host_list(opts: Options, user: str, port: int) -> list[HostSpec]:
    texts = list(opts.hosts) + (hosts_file_lines(opts.hosts_file) if opts.hosts_file else [])
    if not texts:
        raise UsageError("give at least one --host or a --hosts-file")
    return [parse_host(t, user, port) for t in texts]
