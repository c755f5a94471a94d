"""The paramiko session to a board: algorithms, windows and socket options measured for our
boards, and the policy that records a new host key when the user asked for it."""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko

from .algorithms import CIPHERS, MACS

# Our receive windows govern only what the board sends us (command output, reads: 64 MiB and
# paramiko's 2 MiB measured alike); an upload is paced by the board's window, which dropbear
# keeps at 24 KiB unless started with -W (the layer's dropbear bbappend, board file [ssh]
# dropbear_receive_window; figures in docs/boards.md). The packet size is the largest
# dropbear takes (32768).
CLIENT_WINDOW = 64 << 20  # the transport's default, for every channel we open without one
CHANNEL_WINDOW = 16 << 20
MAX_PACKET = 32768


def _preferred(ours: tuple[str, ...], available) -> list[str]:
    return [c for c in ours if c in available] + [c for c in available if c not in ours]


class QuickAckSocket(socket.socket):
    """Acknowledges what it receives at once (TCP_QUICKACK before each read: the kernel goes
    back to delayed ACKs by itself). sshd runs exec sessions with Nagle's algorithm, so a
    reply's second small packet (the lock's "acquired" after the exec's success) waited for
    our delayed ACK, and taking the board lock waited for it on every command."""

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass
        return super().recv(bufsize, flags)


def transport_factory(sock, **kwargs) -> paramiko.Transport:
    # Nagle's algorithm held each request that follows a small write (a channel open, an exec)
    # until the board's delayed ACK, a delay on every command. Every packet goes
    # out in one write, so nothing is gained by holding them.
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if hasattr(socket, "TCP_QUICKACK"):  # Linux
            timeout = sock.gettimeout()
            sock = QuickAckSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
            sock.settimeout(timeout)
    t = paramiko.Transport(sock, default_window_size=CLIENT_WINDOW, default_max_packet_size=MAX_PACKET, **kwargs)
    opts = t.get_security_options()
    opts.ciphers = _preferred(CIPHERS, opts.ciphers)
    opts.digests = _preferred(MACS, opts.digests)
    opts.compression = ["none"]
    return t


class RecordNewHost(paramiko.MissingHostKeyPolicy):
    """--trust-new-host: accept an unknown key and write it to the known_hosts file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client, hostname, key):
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="ascii") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
