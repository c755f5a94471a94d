"""Raw SSH throughput with paramiko, for bench/bench_ssh_transport.py (beside
emulated_board.py, which boots what it measures, as sshd.py serves bench_deploy.py): a
transport offering one cipher and MAC, uploads into ``cat > /dev/null`` over one or several
channels, a download, and the CPU time of a process."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import paramiko

CHUNK = 1 << 20


def connect(
    port: int,
    key: Path,
    known_hosts: Path,
    cipher: str | None = None,
    mac: str | None = None,
    *,
    window: int = 64 << 20,
    packet: int = 32768,
    user: str = "root",
) -> paramiko.Transport:
    """A logged-in transport to 127.0.0.1:port offering only ``cipher`` and ``mac`` (when
    given; "-" for an AEAD cipher's MAC), the host key checked against ``known_hosts``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    t = paramiko.Transport(sock, default_window_size=window, default_max_packet_size=packet)
    opts = t.get_security_options()
    if cipher:
        opts.ciphers = [cipher]
    if mac and mac != "-":
        opts.digests = [mac]
    t.start_client(timeout=60)
    want = paramiko.HostKeys(str(known_hosts)).lookup(f"[127.0.0.1]:{port}")
    got = t.get_remote_server_key()
    if not want or want.get(got.get_name()) != got:
        t.close()
        raise paramiko.SSHException("the board's host key is not the recorded one")
    t.auth_publickey(user, paramiko.Ed25519Key.from_private_key_file(str(key)))
    return t


def in_parallel(jobs) -> float:
    """Run the callables in threads at once; seconds until all are done (the first error is
    raised again)."""
    errors: list[BaseException] = []

    def run(job):
        try:
            job()
        except BaseException as e:  # noqa: BLE001 - raised again below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def upload(t: paramiko.Transport, payload: memoryview, channels: int = 1, *, window: int = 16 << 20) -> float:
    """Seconds to push the payload into `cat > /dev/null`, split over N channels."""
    chans = [t.open_session(window_size=window, max_packet_size=32768) for _ in range(channels)]
    for c in chans:
        c.exec_command("cat > /dev/null")
    part = -(-len(payload) // channels)

    def send(c, view):
        for i in range(0, len(view), CHUNK):
            c.sendall(view[i : i + CHUNK])
        c.shutdown_write()
        if c.recv_exit_status() != 0:
            raise RuntimeError("cat failed on the board")

    try:
        return in_parallel([lambda c=c, i=i: send(c, payload[i * part : (i + 1) * part]) for i, c in enumerate(chans)])
    finally:
        for c in chans:
            c.close()


def download(t: paramiko.Transport, nbytes: int) -> float:
    c = t.open_session()
    t0 = time.perf_counter()
    c.exec_command(f"head -c {nbytes} /dev/zero")
    got = 0
    while True:
        data = c.recv(CHUNK)
        if not data:
            break
        got += len(data)
    c.close()
    if got != nbytes:
        raise RuntimeError(f"download gave {got} of {nbytes} bytes")
    return time.perf_counter() - t0


def negotiated(t: paramiko.Transport) -> str:
    return f"{t.local_cipher} / {t.local_mac} / compression {t.local_compression}"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
