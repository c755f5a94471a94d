"""One error for one cause: a board that cannot be reached is ``cannot connect: HOST:PORT:
connection refused`` (or ``timed out``, ``no route to host``, ``unknown host``) whichever
transport found it (OpenSSH's words, paramiko's exception, or our own TCP probe), and it is
said before anything else about that board (a missing known_hosts file, a host key)."""

from __future__ import annotations

import errno
import socket

from ...errors import DeployError
from .hosts import HostSpec

PROBE_TIMEOUT = 10.0

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ETIMEDOUT: "timed out",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "no route to host",
}
#: what OpenSSH's ssh says → the same words
_SSH_WORDS = {
    "connection refused": "connection refused",
    "timed out": "timed out",
    "no route to host": "no route to host",
    "network is unreachable": "no route to host",
    "could not resolve": "unknown host",
    "name or service not known": "unknown host",
}


def cannot_connect(spec: HostSpec, why: str) -> DeployError:
    return DeployError(f"cannot connect: {_address(spec)}: {why}")


def _address(spec: HostSpec) -> str:
    return f"[{spec.host}]:{spec.port}" if ":" in spec.host else f"{spec.host}:{spec.port}"


def why_not(e: BaseException) -> str | None:
    """The words for an exception of a failed TCP connection (paramiko's
    ``NoValidConnectionsError`` carries one per address), or None when it is not one."""
    if isinstance(e, socket.gaierror):
        return "unknown host"
    if isinstance(e, (TimeoutError, socket.timeout)):
        return "timed out"
    inner = getattr(e, "errors", None)  # paramiko: {address: OSError}
    if isinstance(inner, dict) and inner:
        found = [why_not(x) for x in inner.values() if isinstance(x, BaseException)]
        return next((w for w in found if w), None)
    if isinstance(e, OSError) and e.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[e.errno]
    return None


def from_ssh(said: str) -> str | None:
    """The words for what OpenSSH's ``ssh`` said when it could not connect, or None."""
    low = said.lower()
    if "connect to host" not in low and "could not resolve" not in low and "resolve hostname" not in low:
        return None
    return next((w for k, w in _SSH_WORDS.items() if k in low), None)


def probe(spec: HostSpec, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise :func:`cannot_connect` unless a TCP connection to the board's SSH port opens."""
    try:
        with socket.create_connection((spec.host, spec.port), timeout=timeout):
            pass
    except OSError as e:
        raise cannot_connect(spec, why_not(e) or str(e)) from None
