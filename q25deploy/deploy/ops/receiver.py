"""Who writes an upload on the board.

``q25tok receive FILE`` where the board can run one: one process reads each block once,
writes it and hashes it with the CPU's SHA-256 instructions (an A53's crypto extensions), and
hands the written ranges to the kernel's writeback as the file grows. Otherwise the shell's
``tee`` into the board's fastest sha256 (:data:`.connection.RECEIVE`), which costs an extra
pipe, small reads and a second process per byte.

The receiver runs as root (``--become``, a root login), so it is the image's ``q25tok`` (the
board file's runtime path, the package manager's) and never one in the install directory:
not the current release's, not the release's own just staged there (whoever can write the
install directory could swap it between its digest and its run; docs/security.md, "the one
rule"). A release's own ``q25tok`` travels through the shell like any file; when the image has
none that receives, the rest is received by a private copy of the one just sent, hashed in a
directory the running user alone made (:mod:`.trusted_q25tok`), never by the staged file. A candidate is
used only after it received an empty input and printed the empty input's sha256: a ``q25tok``
older than ``receive``, or one built for another CPU, is passed over; so is one whose
``receive`` writes into a file that exists (before issue 44 it truncated it, following links:
the deploy user, who owns ``releases/``, could point the upload at a file of root's).
Without a q25tok that receives, the shell does (``tee``; as root only into a new file of a
directory of root's, :data:`.boardbase.ROOT_TARGET`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import ExitStack

from ...layout import RUNTIME_BIN
from ..state.trusted_q25tok import Unverified, release_q25tok
from ..transport.boardbase import BoardSession

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# each argument a q25tok to try; prints the first that receives into a new file (in a directory
# mktemp made: the running user's alone), hashes correctly, and refuses (exit 10) to receive
# into that file again, now that it exists
PROBE = (
    'd=$(mktemp -d "${TMPDIR:-/tmp}/q25rx.XXXXXX") || exit 0; '
    'for q; do [ -x "$q" ] && [ "$("$q" receive "$d/p" </dev/null 2>/dev/null)" = '
    + EMPTY_SHA256
    + ' ] && { "$q" receive "$d/p" </dev/null >/dev/null 2>&1; [ $? = 10 ]; } && { rm -rf "$d"; echo "$q"; exit 0; }; '
    'rm -f "$d/p"; done; rm -rf "$d"; :'
)


def probe(board: BoardSession, candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` that works as a receiver on the board, or None."""
    candidates = [c for c in dict.fromkeys(candidates) if c]
    if not candidates:
        return None
    _, out, _ = board.run(["sh", "-c", PROBE, "sh", *candidates], check=False)
    found = out.decode("utf-8", "replace").strip()
    return found if found in candidates else None


def choose(
    board: BoardSession,
    candidates: Sequence[str],
    uploads: list,
    staged: Callable[[str], str],
    send: Callable,
    stack: ExitStack,
    runtime_sha256: str | None = None,
) -> list[tuple]:
    """Set ``board.receiver`` for this session's uploads (the first of ``candidates``, the
    image's, that receives); when ``uploads`` carry the runtime it is sent first
    (``send(file) -> (file, digest)``) through the shell, never by a q25tok while it is being
    written. With no image receiver, a private copy of the release's runtime (sent, or kept
    and linked) whose sha256 is the build's (``runtime_sha256``) receives the rest (removed when
    ``stack`` closes). Returns what was sent here."""
    board.receiver = None
    own = next((f for f in uploads if f.rel == RUNTIME_BIN), None)
    sent = [send(own)] if own is not None else []
    board.receiver = probe(board, candidates)
    if board.receiver is None and runtime_sha256 and all(digest == runtime_sha256 for _, digest in sent):
        try:
            copy = stack.enter_context(release_q25tok(board, staged(RUNTIME_BIN), runtime_sha256))
        except Unverified:
            return sent  # the shell receives, and the staged file's digest fails the deploy
        stack.callback(setattr, board, "receiver", None)  # never used once the copy is gone
        board.receiver = probe(board, [copy])  # one built for another CPU is passed over
    return sent
