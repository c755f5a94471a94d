"""How many bytes a board may make the workstation hold: every answer a board sends is
input, and a header that announces a petabyte must not make the workstation allocate it.
A board that sends more is that board's failure (:class:`~q25deploy.errors.DeployError`,
one line, exit 13); the other boards go on."""

from __future__ import annotations

from ...errors import DeployError

#: one command's answer, standard output and error together: the largest thing read from a
#: board is a partition map (at most schema.MAX_JSON, 64 MiB) or its runtime image (a few MB);
#: this module stays light (it is loaded before a board command's first login)
MAX_ANSWER = 65 << 20
#: a line the protocol reads before it knows a length (the agent's header, the lock's answer)
MAX_LINE = 4096
#: the standard error kept of a command that writes on: its last bytes (they say why it failed)
MAX_STDERR = 1 << 16
#: the most one read asks for: never a length the board announced
CHUNK = 1 << 16


def too_large(name: str, what: str, limit: int) -> DeployError:
    return DeployError(f"{name}: the board's {what} is larger than {limit:,} bytes; refused")


def keep_tail(buf: bytearray, data: bytes, limit: int = MAX_STDERR) -> None:
    """Append ``data`` to ``buf``, keeping only its last ``limit`` bytes."""
    buf += data
    if len(buf) > limit:
        del buf[: len(buf) - limit]
