"""A real OpenSSH sshd on loopback for deploy tests and benchmarks, and a TCP proxy that
cuts connections after N bytes."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
USER = getpass.getuser()  # who the test boards log in


def keygen(path: Path) -> Path:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHServer:
    """sshd -D on 127.0.0.1:<free port>, logging in the user running it (root on CI) with
    ``client_key``; an sshd started by another user can only log in that user. ``address`` and
    ``prefix`` put it elsewhere: ``prefix`` starts it (``ip netns exec NS``), ``address`` is
    where it listens there (bench/shaped_link.py)."""

    def __init__(
        self,
        workdir: Path,
        client_key: Path,
        env_path: str | None = None,
        env: dict[str, str] | None = None,
        address: str = "127.0.0.1",
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.dir, self.address = workdir, address
        workdir.mkdir(parents=True, exist_ok=True)
        self.host_key = keygen(workdir / "host_ed25519")
        (workdir / "authorized_keys").write_text(Path(str(client_key) + ".pub").read_text())
        self.port = free_port()
        try:  # the privilege-separation directory; only root needs (and may create) it
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        cmd = [
            *prefix,
            SSHD,
            "-D",
            "-e",
            "-f",
            "/dev/null",
            "-o",
            f"HostKey={self.host_key}",
            "-o",
            f"PidFile={workdir / 'sshd.pid'}",
            "-o",
            f"ListenAddress={address}",
            "-o",
            f"Port={self.port}",
            "-o",
            f"AuthorizedKeysFile={workdir / 'authorized_keys'}",
            "-o",
            "StrictModes=no",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            "KbdInteractiveAuthentication=no",
            "-o",
            "PermitRootLogin=prohibit-password",
            "-o",
            "Subsystem=sftp internal-sftp",
            "-o",
            "MaxSessions=64",
            "-o",
            "MaxStartups=64",
        ]
        # bash as the login shell sources ~/.bashrc for every remote command, and a workstation's
        # may start pyenv or conda (slowing every command): a board's BusyBox sh reads
        # nothing. bash skips it for a nested shell, which SHLVL=1 makes every session's shell.
        # (sshd takes only the first SetEnv line: one line for both.)
        session_env = {"SHLVL": "1", **({"PATH": env_path} if env_path else {}), **(env or {})}
        cmd += ["-o", "SetEnv=" + " ".join(f"{k}={v}" for k, v in session_env.items())]
        self.log = open(workdir / "sshd.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(workdir / 'sshd.log').read_text()}")
            try:
                with socket.create_connection((address, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start")

    @property
    def host_line(self) -> str:
        kind, key = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {kind} {key}"

    def known_hosts(self, path: Path) -> Path:
        path.write_text(self.host_line + "\n")
        return path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to a server and cuts every connection once ``limit``
    bytes have gone from the client to the server."""

    def __init__(self, target_port: int, limit: int) -> None:
        self.target_port, self.limit = target_port, limit
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.cut = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self._forward(client, socket.create_connection(("127.0.0.1", self.target_port)))

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        """Both directions of one connection, each in a thread of its own."""
        sent = [0]

        def pipe(a, b, count, sent):  # this connection's counter (a closure would see the next one's)
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    if count:
                        sent[0] += len(data)
                        if sent[0] > self.limit:
                            self.cut.set()
                            break
                    b.sendall(data)
            except OSError:
                pass
            _shut(a, b)

        threading.Thread(target=pipe, args=(client, server, True, sent), daemon=True).start()
        threading.Thread(target=pipe, args=(server, client, False, sent), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def _shut(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class SlowProxy(CuttingProxy):
    """Forwards 127.0.0.1:<port> to a server, the client's bytes at ``rate`` bytes/s per
    connection (a slow link: an upload that lasts); ``forwarded``: the client's bytes so far."""

    def __init__(self, target_port: int, rate: int) -> None:
        self.rate, self.forwarded = rate, 0
        super().__init__(target_port, limit=0)

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
        threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, a, b, slow: bool) -> None:
        start, sent = time.monotonic(), 0
        try:
            while data := a.recv(16384):
                b.sendall(data)
                if slow:
                    sent += len(data)
                    self.forwarded += len(data)
                    time.sleep(max(0.0, start + sent / self.rate - time.monotonic()))
        except OSError:
            pass
        _shut(a, b)


__all__ = ["USER", "CuttingProxy", "SSHServer", "SlowProxy", "keygen", "os"]


def board_command(command: str, port: int, key, known_hosts, root, *extra: str) -> list[str]:
    """``q25deploy COMMAND`` against a loopback board: its sshd on ``port``, the test key,
    host keys checked against ``known_hosts``, the board's files under ``root``; then ``extra``."""
    return [
        command,
        "--target",
        "qemu",
        "--host",
        f"{USER}@127.0.0.1:{port}",
        "--identity",
        str(key),
        "--known-hosts",
        str(known_hosts),
        "--remote-root",
        str(root),
        *extra,
    ]
