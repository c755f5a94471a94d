"""A board's install directory: the one gate for board paths, and its crash-safe state.

Every path on a board comes from :meth:`BoardFiles.path`, which refuses (never normalises)
an absolute path, an empty, ``.`` or ``..`` part: nothing outside ``<remote-root><install>``
is named. The state file and ``current`` agree after a cut at any step: a switch first
writes ``.q25deploy-intent.json`` (the state that holds after it), then switches, writes the
state and removes the intent; :meth:`BoardFiles.reconcile` (every deploy and rollback, under
the board lock) finishes or drops what a cut left, by ``readlink current``.
"""

from __future__ import annotations

import io
import re

from .. import schema
from ..common import json_bytes
from ..errors import DeployError, SchemaError
from .boardlock import LOCK_NAME, board_lock
from .connection import Board

STATE_NAME = ".q25deploy-state.json"
INTENT_NAME = ".q25deploy-intent.json"
ABSENT = 44  # status of the read script when the file does not exist
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# $1 file: its bytes; exit ABSENT when there is none; a symlink or unreadable file is an error
READ = 'if [ -L "$1" ]; then echo "$1: a symlink" >&2; exit 1; fi; [ -e "$1" ] || exit 44; exec cat "$1"'


def _plain(path: str, what: str) -> str:
    parts = path.strip("/").split("/")
    if any(p in (".", "..") for p in parts) or _CONTROL.search(path):
        raise DeployError(f"refusing {what} {path!r}: it has a '.' or '..' part or a control character")
    return "/".join(p for p in parts if p)


class BoardFiles:
    """Paths on one board under ``base``: the install directory, under the remote root (a
    chroot or data partition) when one is given. Nothing else is prefixed by the remote root."""

    def __init__(self, board: Board, remote_root: str, install_dir: str) -> None:
        self.board = board
        root = _plain(remote_root, "remote root") if remote_root else ""
        self.root = "/" + root if root else ""
        self.base = f"{self.root}/{_plain(install_dir, 'install directory')}"
        if self.base == "/":
            raise DeployError("refusing to install into /")

    def path(self, rel: str) -> str:
        """``base/rel``; refuses an absolute ``rel`` or one with an empty, ``.`` or ``..`` part."""
        parts = rel.split("/") if isinstance(rel, str) else [""]
        if not rel or any(p in ("", ".", "..") for p in parts) or _CONTROL.search(rel):
            raise DeployError(f"{self.board.spec.name}: refusing to touch {rel!r}: not a plain path inside {self.base}")
        return f"{self.base}/{rel}"

    def release_dir(self, release_id: str) -> str:
        return self.path(f"releases/{schema.release_id(release_id, self.board.spec.name, 'release id')}")

    # -- JSON files on the board -------------------------------------------------------------
    def read(self, rel: str) -> bytes | None:
        """A file under the install directory; None when it is absent (unreadable: an error)."""
        return self._read(rel)

    def _read(self, name: str) -> bytes | None:
        status, out, err = self.board.run(["sh", "-c", READ, "sh", self.path(name)], check=False)
        if status == ABSENT:
            return None
        if status != 0:
            msg = err.decode("utf-8", "replace").strip().splitlines()
            raise DeployError(f"{self.board.spec.name}: cannot read {self.path(name)} ({status}: "
                              f"{msg[-1] if msg else 'no output'}); nothing was changed")
        return out

    def _write(self, name: str, doc: dict) -> None:
        data = json_bytes(doc)
        tmp = self.path(name + ".tmp")
        self.board.upload(io.BytesIO(data), len(data), tmp)
        # the rename itself must reach the disk too: a power cut after a deploy returned must
        # not bring the old state back (found on the emulated board's ext4 disk)
        self.board.run(["sh", "-c", 'sync "$1" 2>/dev/null || sync; mv -f "$1" "$2" && sync', "sh", tmp,
                        self.path(name)])

    def read_state(self) -> dict:
        """The state file, checked; an empty state when there is none (an unreadable one is an error)."""
        data = self._read(STATE_NAME)
        if data is None:
            return {"format": schema.STATE_FORMAT, "current": None, "previous": None, "releases": {}}
        where = f"{self.board.spec.name}: {self.path(STATE_NAME)}"
        try:
            return schema.parse_state(schema.loads(data, where), where)
        except SchemaError as e:
            raise DeployError(f"{e} (not a q25deploy state file; nothing was changed)") from None

    def write_state(self, state: dict) -> None:
        self._write(STATE_NAME, state)

    def read_intent(self) -> dict | None:
        data = self._read(INTENT_NAME)
        if data is None:
            return None
        where = f"{self.board.spec.name}: {self.path(INTENT_NAME)}"
        try:
            return schema.parse_intent(schema.loads(data, where), where)
        except SchemaError as e:
            raise DeployError(f"{e} (remove it if no q25deploy is running)") from None

    def current_link(self) -> str | None:
        """The release ``current`` points at; None when there is no link (or it names no release)."""
        status, out, _ = self.board.run(["readlink", self.path("current")], check=False)
        target = out.decode("utf-8", "replace").strip()
        m = re.fullmatch(r"releases/([0-9a-f]{16})", target)
        return m.group(1) if status == 0 and m else None

    # -- switching ----------------------------------------------------------------------------
    def switch(self, release_id: str) -> str | None:
        """current -> releases/<id>, by one rename (``mv -T``). BusyBox's mv has no -T and
        would move into the old release, so there the link is replaced with ``ln -sfn``
        (not atomic: a reader may briefly find no ``current``); returns that warning."""
        self.release_dir(release_id)
        tmp, cur = self.path(".current.tmp"), self.path("current")
        script = ('rm -f "$1" && ln -s "$2" "$1" || exit 1; '
                  'if mv -T -f "$1" "$3" 2>/dev/null; then sync; exit 0; fi; '
                  'rm -f "$1"; ln -sfn "$2" "$3" && sync && echo non-atomic')
        _, out, _ = self.board.run(["sh", "-c", script, "sh", tmp, f"releases/{release_id}", cur])
        if b"non-atomic" in out:
            return ("the board's mv has no -T (BusyBox): current was switched with ln -sfn, which is not atomic; "
                    "install coreutils' mv on the board for an atomic switch")
        return None

    def commit(self, state: dict) -> str | None:
        """Make ``state`` true: intent, switch ``current`` to its current release, state, no intent."""
        self._write(INTENT_NAME, {"format": schema.INTENT_FORMAT, "current": state["current"], "state": state})
        warning = self.switch(state["current"])
        self.write_state(state)
        self.board.run(["rm", "-f", self.path(INTENT_NAME)])
        return warning

    def reconcile(self) -> tuple[dict, list[str]]:
        """The board's state after whatever a cut left (call under the lock): an intent whose
        switch happened becomes the state, one whose switch did not is dropped; a missing
        ``current`` link is restored to the state's release. Returns (state, warnings)."""
        state, intent, link = self.read_state(), self.read_intent(), self.current_link()
        warnings: list[str] = []
        if intent is not None:
            if link == intent["current"]:
                state = intent["state"]
                self.write_state(state)
                warnings.append(f"finished the switch to {link} that an earlier run was cut in")
            else:
                warnings.append(f"dropped the switch to {intent['current']} that an earlier run was cut before")
            self.board.run(["rm", "-f", self.path(INTENT_NAME)])
        cur = state.get("current")
        if cur and link is None and self.board.run(["test", "-d", self.release_dir(cur)], check=False)[0] == 0:
            warnings.extend(w for w in [self.switch(cur)] if w)
            warnings.append(f"restored the current link to {cur}")
        elif link != cur:
            warnings.append(f"current points at {link or 'nothing'} but the state file says {cur or 'nothing'}; "
                            "left as it is")
        return state, warnings

    def remove_release(self, release_id: str) -> None:
        """Delete ``releases/<id>`` unless ``current`` points at it (checked on the board)."""
        self.board.run(["sh", "-c", '[ "$(readlink "$1")" = "$2" ] || rm -rf "$3"', "sh", self.path("current"),
                        f"releases/{release_id}", self.release_dir(release_id)], check=False)

    def lock(self):
        """The board lock (see :mod:`q25deploy.deploy.boardlock`) as a context manager."""
        return board_lock(self.board, self.path(LOCK_NAME))
