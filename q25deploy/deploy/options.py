"""What a deploy, smoke, status or rollback run was asked (:class:`Options`) and the boards it
goes to: light to import, so the command can start logging in to the boards before it loads
the rest (see :func:`q25deploy.deploy.sshboard.begin_login`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DeployError, UsageError
from .hosts import HostSpec, parse_host


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
    verify_board: bool = False  # deploy: hash the board's kept files too, send again what differs
    become: str | None = None  # --become: overrides the board file's [ssh] become
    transfer: str = "auto"  # deploy --transfer: large files through OpenSSH's ssh (auto, openssh) or paramiko
    allow_unreserved: bool = False  # deploy: send a plan the board's device tree does not reserve (a warning)


def host_list(opts: Options, user: str, port: int) -> list[HostSpec]:
    texts = list(opts.hosts)
    if opts.hosts_file:
        try:
            for line in Path(opts.hosts_file).read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    texts.append(line)
        except OSError as e:
            raise DeployError(f"{opts.hosts_file}: cannot read: {e.strerror}") from None
    if not texts:
        raise UsageError("give at least one --host or a --hosts-file")
    return [parse_host(t, user, port) for t in texts]
