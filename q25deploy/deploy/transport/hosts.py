"""Which board: ``[user@]host[:port]`` as the command line and hosts files give it."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UsageError


@dataclass(frozen=True)
class HostSpec:
    host: str
    user: str
    port: int

    @property
    def name(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def parse_host(text: str, default_user: str, default_port: int) -> HostSpec:
    """``[user@]host[:port]`` (IPv6 as ``[addr]:port``); a malformed one is a usage error."""
    user, _, rest = text.rpartition("@")
    host, port = rest, str(default_port)
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail:
            if not tail.startswith(":"):
                raise UsageError(f"bad host {text!r} (expected [user@]host[:port])")
            port = tail[1:]
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    if not host or any(c.isspace() or c in "/\\'\"`$;&|<>" for c in host + user):
        raise UsageError(f"bad host {text!r} (expected [user@]host[:port])")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"bad port in host {text!r}: {port!r} is not a port number (1-65535)")
    return HostSpec(host, user or default_user, int(port))
