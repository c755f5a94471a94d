"""The test suite's fault injector: CuttingProxy cuts each connection once that connection
has sent ``limit`` bytes; the bytes of one connection never count against another."""

from __future__ import annotations

import socket
import threading

from sshd import CuttingProxy


def sink() -> tuple[socket.socket, list[int]]:
    """A loopback server that reads and counts whatever each connection sends."""
    srv = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []

    def drain(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                got.append(len(data))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, got


def wait_for(predicate) -> bool:
    for _ in range(250):
        if predicate():
            return True
        threading.Event().wait(0.02)
    return False


def test_each_connection_has_its_own_budget():
    srv, got = sink()
    proxy = CuttingProxy(srv.getsockname()[1], limit=100_000)
    conns = []
    try:
        first = socket.create_connection(("127.0.0.1", proxy.port))
        conns.append(first)
        first.sendall(b"a" * 40_000)
        assert wait_for(lambda: sum(got) == 40_000)
        second = socket.create_connection(("127.0.0.1", proxy.port))
        conns.append(second)
        second.sendall(b"b" * 60_000)
        assert wait_for(lambda: sum(got) == 100_000)
        first.sendall(b"a" * 50_000)  # 90 kB on the first, 60 kB on the second: neither is over
        assert wait_for(lambda: sum(got) == 150_000), "a connection under its budget was cut"
        assert not proxy.cut.is_set()
        third = socket.create_connection(("127.0.0.1", proxy.port))
        conns.append(third)
        try:
            third.sendall(b"c" * 100_001)  # over its own budget: cut
        except OSError:
            pass
        assert wait_for(proxy.cut.is_set)
    finally:
        for c in conns:
            c.close()
        proxy.close()
        srv.close()
