"""A link like a board's, for benchmarks: a veth pair into a network namespace of our own,
shaped with a token bucket (tc tbf) to 1 Gbit/s each way: the KV260's and ZCU104's
1000BASE-T. On loopback the host and the "board" share two cores and the link is a memory
copy; here the wire is the limit, as on a desk. Needs root (ip netns, tc); nothing outside
the namespace and the pair is touched, and both are removed afterwards."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

HOST_IP, BOARD_IP = "10.251.77.1", "10.251.77.2"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextlib.contextmanager
def shaped_link(rate: str = "1gbit") -> Iterator[tuple[str, tuple[str, ...]]]:
    """Yields (the board's address, the prefix that runs a command in its namespace)."""
    tag = f"q25b{os.getpid() % 100000}"
    ns, host_if, board_if = tag, f"{tag}h", f"{tag}b"
    in_ns = ("ip", "netns", "exec", ns)
    _run("ip", "netns", "add", ns)
    try:
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", board_if)
        _run("ip", "link", "set", board_if, "netns", ns)
        _run("ip", "addr", "add", f"{HOST_IP}/30", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run(*in_ns, "ip", "addr", "add", f"{BOARD_IP}/30", "dev", board_if)
        _run(*in_ns, "ip", "link", "set", board_if, "up")
        _run(*in_ns, "ip", "link", "set", "lo", "up")
        for prefix, dev in (((), host_if), (in_ns, board_if)):  # both directions
            _run(
                *prefix,
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "256kb",
                "latency",
                "20ms",
            )
        yield BOARD_IP, in_ns
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
