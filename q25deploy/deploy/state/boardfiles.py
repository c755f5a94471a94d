"""A board's install directory: the one gate for board paths, and its crash-safe state.

Every path on a board comes from :meth:`BoardFiles.path`, which refuses (never normalises)
an absolute path, an empty, ``.`` or ``..`` part: nothing outside ``<remote-root><install>``
is named. The state file and ``current`` agree after a cut at any step: a switch first
writes ``.q25deploy-intent.json`` (the state that holds after it), then switches, writes the
state and removes the intent; :meth:`BoardFiles.reconcile` (every deploy and rollback, under
the board lock) finishes or drops what a cut left, by ``readlink current``.
"""

from __future__ import annotations

import re

from ... import schema
from ...common import json_bytes
from ...errors import DeployError, SchemaError
from ..transport.boardbase import BoardSession
from .boardlock import LOCK_NAME, board_lock
from .reserved import LISTING, parse_listing, split_listing

STATE_NAME = ".q25deploy-state.json"
INTENT_NAME = ".q25deploy-intent.json"
ABSENT = 44  # status of the read script when the file does not exist
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# $1 file: its bytes; exit ABSENT when there is none; a symlink or unreadable file is an error
READ = 'if [ -L "$1" ]; then echo "$1: a symlink" >&2; exit 1; fi; [ -e "$1" ] || exit 44; exec cat "$1"'
# $1 state, $2 intent (and $5, when given): "file <size>" and its bytes, or "none", each; then
# $4's reserved memory (reserved.LISTING: its lines and "end"); then $3's link target
# $1 releases/: the staging directories an earlier deploy left (a cut, a second Ctrl-C), removed
# under the lock (no run is staging), each name printed; never the OTA's (.incoming-ota)
LEFTOVERS = (
    'for d in "$1"/.incoming-*; do n=${d##*/}; case $n in .incoming-ota|".incoming-*") ;; '
    '*) rm -rf "$d" && echo "$n" ;; esac; done; true'
)
SNAPSHOT = (
    'for f in "$1" "$2" ${5:+"$5"}; do if [ -L "$f" ]; then echo "$f: a symlink" >&2; exit 1; fi; '
    'if [ -e "$f" ]; then n=$(wc -c <"$f") && echo "file $n" && cat "$f" || exit 1; else echo none; fi; '
    "done; " + LISTING + 'readlink "$3" || true'
)
# $1 file: standard input into a fresh temporary beside it, on the disk; prints the temporary's
# name. mktemp (O_EXCL) never opens a planted name, and $1 may not be a symlink or a directory
# (mv would follow it or move into it): root never writes through a link it did not create
STAGE = (
    'if [ -L "$1" ] || [ -d "$1" ]; then echo "$1: a symlink or a directory" >&2; exit 1; fi; '
    't=$(mktemp "$1.XXXXXX") || exit 1; '
    'if cat > "$t" && chmod 0644 "$t" && { sync "$t" 2>/dev/null || sync; }; then echo "$t"; '
    'else rm -f "$t"; exit 1; fi'
)
_TEMPORARY = re.compile(r"[A-Za-z0-9]{6}")  # what mktemp puts for XXXXXX
# $1 temporary link, $2 target, $3 current: an atomic switch where mv has -T, else ln -sfn
SWITCH = (
    'rm -f "$1" && ln -s "$2" "$1" || exit 1; '
    'if mv -T -f "$1" "$3" 2>/dev/null; then sync; '
    'else rm -f "$1"; ln -sfn "$2" "$3" && sync && echo non-atomic || exit 1; fi'
)
NON_ATOMIC = (
    "the board's mv has no -T (BusyBox): current was switched with ln -sfn, which is not atomic; "
    "install coreutils' mv on the board for an atomic switch"
)


def _plain(path: str, what: str) -> str:
    parts = path.strip("/").split("/")
    if any(p in (".", "..") for p in parts) or _CONTROL.search(path):
        raise DeployError(f"refusing {what} {path!r}: it has a '.' or '..' part or a control character")
    return "/".join(p for p in parts if p)


def _framed(data: bytes) -> tuple[bytes | None, bytes] | None:
    """One document of SNAPSHOT's answer: (its bytes, or None for ``none``; the rest of the
    answer), or None when the answer is not ``none`` nor ``file N`` followed by N bytes."""
    head, newline, rest = data.partition(b"\n")
    if head == b"none" and newline:
        return None, rest
    words = head.split()
    if len(words) != 2 or words[0] != b"file" or not (words[1].isdigit() and len(words[1]) <= 15) or not newline:
        return None
    n = int(words[1])
    return (rest[:n], rest[n:]) if n <= len(rest) else None


class BoardFiles:
    """Paths on one board under ``base``: the install directory, under the remote root (a
    chroot or data partition) when one is given. Nothing else is prefixed by the remote root."""

    def __init__(self, board: BoardSession, remote_root: str, install_dir: str) -> None:
        self.board = board
        root = _plain(remote_root, "remote root") if remote_root else ""
        self.root = "/" + root if root else ""
        self.install_dir = "/" + _plain(install_dir, "install directory").strip("/")  # as the image has it
        self.base = f"{self.root}{self.install_dir}"
        if self.base == "/":
            raise DeployError("refusing to install into /")
        self.live_reserved: dict | None = None  # the last snapshot's /reserved-memory, when asked for
        self.also_read: bytes | None = None  # the last snapshot's ``also`` file

    #: where the release the board runs is, under the install directory: ``current`` (the link a
    #: deploy or an OTA install switches), or "" where the board runs its image's own assets
    #: (the layer's q25-model-assets, nothing deployed: see :func:`.board_release.image_record`)
    current = "current"

    def cur(self, rel: str = "") -> str:
        """The running release's ``rel`` (its directory without one)."""
        if not self.current:
            return self.path(rel) if rel else self.base
        return self.path(f"{self.current}/{rel}" if rel else self.current)

    def cur_rel(self, rel: str) -> str:
        """``rel`` of the running release, relative to the install directory (for :meth:`read`)."""
        return f"{self.current}/{rel}" if self.current else rel

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
            raise DeployError(
                f"{self.board.spec.name}: cannot read {self.path(name)} ({status}: "
                f"{msg[-1] if msg else 'no output'}); nothing was changed"
            )
        return out

    def _write(self, name: str, doc: dict) -> None:
        # the rename itself must reach the disk too: a power cut after a deploy returned must
        # not bring the old state back (found on the emulated board's ext4 disk)
        self.board.run(
            ["sh", "-c", STAGE + ' && mv -f "$t" "$1" && sync', "sh", self.path(name)], stdin=json_bytes(doc)
        )

    def snapshot(self, device_tree: str | None = None, also: str | None = None) -> tuple[dict, dict | None, str | None]:
        """(state, intent or None, the release ``current`` points at or None) in one command;
        with ``device_tree``, the same command reads its reserved memory into :attr:`live_reserved`
        (:func:`.reserved.parse_listing`; a malformed answer is an error); with ``also`` (a path
        under the install directory), that file's bytes (None: absent) into :attr:`also_read`."""
        status, out, err = self.board.run(
            [
                "sh",
                "-c",
                SNAPSHOT,
                "sh",
                self.path(STATE_NAME),
                self.path(INTENT_NAME),
                self.path("current"),
                device_tree or "-",
                *([self.path(also)] if also else []),
            ],
            check=False,
        )
        if status != 0:
            msg = err.decode("utf-8", "replace").strip().splitlines()
            raise DeployError(
                f"{self.board.spec.name}: cannot read {self.base}'s state ({status}: "
                f"{msg[-1] if msg else 'no output'}); nothing was changed"
            )
        docs: list[bytes | None] = []
        rest = out
        for name in (STATE_NAME, INTENT_NAME, *([also] if also else [])):
            framed = _framed(rest)
            if framed is None:
                raise DeployError(
                    f"{self.board.spec.name}: a malformed answer when reading {self.base}'s {name} "
                    f"({out[:40]!r}); nothing was changed"
                )
            doc, rest = framed
            docs.append(doc)
        listed = split_listing(rest)
        live = parse_listing(listed[0]) if listed and device_tree else None
        if listed is None or (device_tree and live is None):
            raise DeployError(
                f"{self.board.spec.name}: a malformed answer when reading {device_tree}/reserved-memory; "
                "nothing was changed"
            )
        self.live_reserved, rest = live, listed[1]
        self.also_read = docs[2] if also else None
        m = re.fullmatch(r"releases/([0-9a-f]{16})", rest.decode("utf-8", "replace").strip())
        return self._state(docs[0]), self._intent(docs[1]), (m.group(1) if m else None)

    def read_state(self) -> dict:
        """The state file, checked; an empty state when there is none (an unreadable one is an error)."""
        return self._state(self._read(STATE_NAME))

    def _state(self, data: bytes | None) -> dict:
        if data is None:
            return {"format": schema.STATE_FORMAT, "current": None, "previous": None, "releases": {}}
        where = f"{self.board.spec.name}: {self.path(STATE_NAME)}"
        try:
            return schema.parse_state(schema.loads(data, where), where)
        except SchemaError as e:
            raise DeployError(f"{e} (not a q25deploy state file; nothing was changed)") from None

    def write_state(self, state: dict) -> None:
        self._write(STATE_NAME, state)

    def _intent(self, data: bytes | None) -> dict | None:
        if data is None:
            return None
        where = f"{self.board.spec.name}: {self.path(INTENT_NAME)}"
        try:
            return schema.parse_intent(schema.loads(data, where), where)
        except SchemaError as e:
            raise DeployError(f"{e} (remove it if no q25deploy is running)") from None

    # -- switching ----------------------------------------------------------------------------
    def switch(self, release_id: str) -> str | None:
        """current -> releases/<id>, by one rename (``mv -T``). BusyBox's mv has no -T and
        would move into the old release, so there the link is replaced with ``ln -sfn``
        (not atomic: a reader may briefly find no ``current``); returns that warning."""
        self.release_dir(release_id)
        _, out, _ = self.board.run(
            ["sh", "-c", SWITCH, "sh", self.path(".current.tmp"), f"releases/{release_id}", self.path("current")]
        )
        return NON_ATOMIC if b"non-atomic" in out else None

    def commit(self, state: dict) -> str | None:
        """Make ``state`` true: intent, switch ``current`` to its current release, state, no intent
        (three commands: the intent written, the new state staged, then switch + state + no intent)."""
        self.release_dir(state["current"])
        self._write(INTENT_NAME, {"format": schema.INTENT_FORMAT, "current": state["current"], "state": state})
        _, out, _ = self.board.run(["sh", "-c", STAGE, "sh", self.path(STATE_NAME)], stdin=json_bytes(state))
        state_tmp = out.decode("utf-8", "replace").strip()
        if not (
            state_tmp.startswith(self.path(STATE_NAME) + ".")
            and _TEMPORARY.fullmatch(state_tmp[len(self.path(STATE_NAME)) + 1 :])
        ):
            raise DeployError(
                f"{self.board.spec.name}: mktemp answered {state_tmp[:80]!r}, not a temporary "
                f"beside {STATE_NAME}; nothing was switched"
            )
        script = SWITCH + '; mv -f "$4" "$5" && sync && rm -f "$6"'
        _, out, _ = self.board.run(
            [
                "sh",
                "-c",
                script,
                "sh",
                self.path(".current.tmp"),
                f"releases/{state['current']}",
                self.path("current"),
                state_tmp,
                self.path(STATE_NAME),
                self.path(INTENT_NAME),
            ]
        )
        return NON_ATOMIC if b"non-atomic" in out else None

    def reconcile(self, device_tree: str | None = None) -> tuple[dict, list[str]]:
        """The board's state after whatever a cut left (call under the lock): an intent whose
        switch happened becomes the state, one whose switch did not is dropped; a missing
        ``current`` link is restored to the state's release. Returns (state, warnings).
        ``device_tree``: see :meth:`snapshot`."""
        state, intent, link = self.snapshot(device_tree)
        warnings: list[str] = []
        if intent is not None:
            if link == intent["current"]:
                state = intent["state"]
                self.write_state(state)
                warnings.append(f"finished the switch to {link} that an earlier run was cut in")
            else:
                warnings.append(f"dropped the switch to {intent['current']} that an earlier run was cut before")
            self.board.run(["rm", "-f", self.path(INTENT_NAME)])
        _, out, _ = self.board.run(["sh", "-c", LEFTOVERS, "sh", self.path("releases")], check=False)
        warnings += [
            f"removed releases/{name}, which an earlier run left" for name in out.decode("utf-8", "replace").split()
        ]
        cur = state.get("current")
        if cur and link is None and self.board.run(["test", "-d", self.release_dir(cur)], check=False)[0] == 0:
            warnings.extend(w for w in [self.switch(cur)] if w)
            warnings.append(f"restored the current link to {cur}")
        elif link != cur:
            warnings.append(
                f"current points at {link or 'nothing'} but the state file says {cur or 'nothing'}; left as it is"
            )
        return state, warnings

    def retract(self, state: dict, release_id: str) -> None:
        """Undo the switch to ``release_id`` where ``state`` (the state before it) has no current
        release: the state first (a cut after it leaves a ``current`` the state does not
        record, which :meth:`reconcile` leaves alone and the next deploy replaces), then the
        link, if it still points at the release, then the release."""
        assert not state.get("current"), "a state with a current release is committed, not retracted"
        self.write_state(state)
        self.board.run(
            ["sh", "-c", '[ "$(readlink "$1")" != "$2" ] || { rm -f "$1" && sync; }', "sh", self.path("current")]
            + [f"releases/{schema.release_id(release_id, self.board.spec.name, 'release id')}"]
        )
        self.remove_release(release_id)

    def remove_release(self, *release_ids: str) -> None:
        """Delete ``releases/<id>`` of each id unless ``current`` points at it (checked on the board)."""
        if not release_ids:
            return
        args = [x for rid in release_ids for x in (f"releases/{rid}", self.release_dir(rid))]
        self.board.run(
            [
                "sh",
                "-c",
                'c=$(readlink "$1"); shift; while [ $# -gt 1 ]; do [ "$c" = "$1" ] || rm -rf "$2"; shift 2; done',
                "sh",
                self.path("current"),
                *args,
            ],
            check=False,
        )

    def lock(self, first=None):
        """The board lock (see :mod:`q25deploy.deploy.state.boardlock`) as a context manager; ``first``:
        what the lock's holder runs before it takes the lock (:func:`~.boardlock.board_lock`)."""
        return board_lock(self.board, self.path(LOCK_NAME), first=first)
