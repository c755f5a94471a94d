"""Who writes an upload on the board.

``q25tok receive FILE`` where the board can run one: one process reads each block once,
writes it and hashes it with the CPU's SHA-256 instructions (an A53's crypto extensions), and
hands the written ranges to the kernel's writeback as the file grows. Otherwise the shell's
``tee`` into the board's fastest sha256 (:data:`.connection.RECEIVE`), which costs an extra
pipe, small reads and a second process per byte.

When the release brings its own ``q25tok`` and the board lacks it (a new runtime, or a kept
copy found damaged), that goes first, through the shell, and once its digest matched the
build's it receives the rest: the runtime being written is then never the one running.
Otherwise the board's own: the current release's ``q25tok``, then the image's (the board
file's runtime path). A candidate is used only after it received an empty input and
printed the empty input's sha256: a ``q25tok`` older than ``receive``, or one built for
another CPU, is passed over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ..packer.layout import RUNTIME_BIN
from .boardbase import BoardBase as Board

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# each argument a q25tok to try; prints the first that receives and hashes correctly
PROBE = (
    'for q; do [ -x "$q" ] && [ "$("$q" receive /dev/null </dev/null 2>/dev/null)" = '
    + EMPTY_SHA256
    + ' ] && { echo "$q"; exit 0; }; done; :'
)


def probe(board: Board, candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` that works as a receiver on the board, or None."""
    candidates = [c for c in dict.fromkeys(candidates) if c]
    if not candidates:
        return None
    _, out, _ = board.run(["sh", "-c", PROBE, "sh", *candidates], check=False)
    found = out.decode("utf-8", "replace").strip()
    return found if found in candidates else None


def choose(
    board: Board, candidates: Sequence[str], uploads: list, staged: Callable[[str], str], send: Callable
) -> list[tuple]:
    """Set ``board.receiver`` for this session's uploads; when ``uploads`` carry the runtime
    it is sent first (``send(file) -> (file, digest)``, through the shell) and, its digest
    matching, tried before ``candidates``. Returns what was sent here."""
    board.receiver = None
    own = next((f for f in uploads if f.rel == RUNTIME_BIN), None)
    sent = [send(own)] if own is not None else []
    if (
        own is not None
        and sent[0][1] == own.sha256
        and board.run(["chmod", "0755", staged(own.rel)], check=False)[0] == 0
    ):
        candidates = [staged(own.rel), *candidates]
    board.receiver = probe(board, candidates)
    return sent
