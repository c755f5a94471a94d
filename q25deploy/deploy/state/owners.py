"""One owner per install directory (issue 44; docs/security.md, "one owner").

Where root installs (``--become sudo|doas``, or a login as root), the install directory
``<remote-root><install dir>``, every directory above it up to ``/`` and everything in it
(``releases/``, ``current``, the state and intent records, ``.q25deploy-loaded``,
``.q25-ota/``...) must be root's (the uid the commands run as) and writable by no one else: a
user who owns a directory on the way can move the tree under root (systemd-tmpfiles calls it an
"unsafe path transition"), one who owns a directory in it can swap in links, FIFOs or a record
of their own between root's check and root's use. Where a deploy user installs (``--become
none``), the install directory is that user's: one that root uses is refused, with the reason
(an install directory is never used both ways).

Checked once per session, before the lock (which creates the install directory) and so before
anything is written: :data:`SCRIPT` lists on the board who owns each path (one fixed ``sh``
script, BusyBox-level: ``id``, ``ls -lnd``, ``find``, ``readlink``, ``cd -P``/``pwd -P``);
:func:`parse` reads its lines (totally: a malformed answer is an error) and :func:`refusal`
decides from them (pure). A refusal is that board's failure, in one line naming the path, its
owner and the fix; nothing is ever "repaired" on the board. A missing install directory is
made by whoever installs, so it is theirs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...errors import DeployError
from ..transport.boardbase import BoardSession
from ..transport.openssh import last_line
from .boardfiles import INTENT_NAME, STATE_NAME

# $1 the install dir. Prints "uid <who runs this>"; "up MODE LINKS UID PATH" for / and each
# directory on the way to $1 (the path as given, then as the kernel resolves it: a symlinked
# /lib is checked, and so is the directory it leads to), "absent PATH" where the way ends;
# when $1 is a directory: "base <its physical path>", "in MODE LINKS UID PATH" for it and
# everything under it (find never follows a link; `stat -c` where the board's has it, else
# `ls -lnd` for each: one process a path), "current <its target>" when it is a link, and
# "odd <n>": the lines of paths with a newline (left out of the "in" lines, which they would split)
SCRIPT = r"""set -f; b=$1; nl='
'
u=$(id -u) || exit 1; echo "uid $u"
if stat -c '%A %h %u %n' / >/dev/null 2>&1; then
  show() { stat -c "$1 %A %h %u %n" "$2" 2>/dev/null || { echo "absent $2"; return 1; }; }
  each() { find "$1" ! -path "*$nl*" -exec stat -c 'in %A %h %u %n' {} + 2>/dev/null; }
else
  show() { k=$1; q=$2; l=$(ls -lnd -- "$q" 2>/dev/null) || { echo "absent $q"; return 1; }; set -- $l; echo "$k $1 $2 $3 $q"; }
  each() { find "$1" ! -path "*$nl*" 2>/dev/null | while IFS= read -r f; do show in "$f"; done; }
fi
walk() {
  show up / || return 1; d=; r=${1#/}; last=/
  while [ -n "$r" ]; do
    c=${r%%/*}; case $r in */*) r=${r#*/} ;; *) r= ;; esac
    [ -n "$c" ] || continue
    d=$d/$c; show up "$d" || return 1; last=$d
  done
}
walk "$b"; p=$(cd -P -- "$last" && pwd -P) || exit 1
[ "$p" = "$last" ] || walk "$p"
[ -d "$b" ] || exit 0
p=$(cd -P -- "$b" && pwd -P) || exit 1; echo "base $p"
each "$p"
if [ -L "$p/current" ]; then echo "current $(readlink -- "$p/current")"; fi
echo "odd $(find "$p" -path "*$nl*" 2>/dev/null | wc -l)"
exit 0"""

#: the one link root follows by design: to a release (a link of root's that points elsewhere,
#: made by a user before a ``chown -R``, would lead root out of the install dir)
CURRENT = re.compile(r"releases/[0-9a-f]{16}")
#: root's own records: read as trusted, so a regular file with one link (never a user's hard link)
RECORDS = (STATE_NAME, INTENT_NAME)
RECORD_DIRS = (".q25-ota",)  # every file directly in it is a record too
_MODE = re.compile(r"[-dlpcbsD][-rwxsStT]{9}[.+@]?")  # ls may add a mark for an ACL or a context


@dataclass(frozen=True)
class Entry:
    """One path of the listing: its ``ls`` mode string, link count and owner."""

    mode: str
    links: int
    uid: int
    path: str

    @property
    def kind(self) -> str:
        return self.mode[0]

    def writable_by_others(self) -> str:
        """ "group", "others", "group and others" or "" (a symlink's mode means nothing)."""
        if self.kind == "l":
            return ""
        who = [w for w, i in (("group", 5), ("others", 8)) if self.mode[i] == "w"]
        return " and ".join(who)

    @property
    def sticky(self) -> bool:
        return self.kind == "d" and self.mode[9] in "tT"


@dataclass
class Listing:
    """What :data:`SCRIPT` answered: who runs the commands, the way to the install dir and,
    when it exists, its physical path and everything in it."""

    uid: int
    up: list[Entry] = field(default_factory=list)
    base: str | None = None
    inside: list[Entry] = field(default_factory=list)
    current: str | None = None  # where ``current`` points, when it is a link
    odd: int = 0


def parse(text: str, where: str) -> Listing:
    """:data:`SCRIPT`'s answer; a line of any other shape is a :class:`DeployError`."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def bad(line: str) -> DeployError:
        return DeployError(f"{where}: a malformed answer when listing who owns the install dir ({line[:80]!r})")

    if not lines or not re.fullmatch(r"uid [0-9]{1,10}", lines[0]):
        raise bad(lines[0] if lines else "")
    out = Listing(uid=int(lines[0][4:]))
    for line in lines[1:]:
        word, _, rest = line.partition(" ")
        if word in ("up", "in"):
            m = re.fullmatch(r"(\S+) ([0-9]{1,10}) ([0-9]{1,10}) (/.*)", rest)
            if m is None or not _MODE.fullmatch(m.group(1)) or (word == "in" and out.base is None):
                raise bad(line)
            entry = Entry(m.group(1), int(m.group(2)), int(m.group(3)), m.group(4))
            (out.up if word == "up" else out.inside).append(entry)
        elif word == "current" and out.base is not None and out.current is None:
            out.current = rest
        elif word == "absent" and rest.startswith("/"):
            continue  # the way ends there (made later), or an entry that went while listed
        elif word == "base" and rest.startswith("/") and out.base is None:
            out.base = rest
        elif word == "odd" and rest.isdigit() and len(rest) <= 10:
            out.odd = int(rest)
        else:
            raise bad(line)
    return out


def _rel(entry: Entry, base: str) -> str:
    return entry.path[len(base) + 1 :] if entry.path.startswith(base + "/") else entry.path


def refusal(listing: Listing, *, install_dir: str, root: bool, user: str) -> str | None:
    """Why this install dir may not be used by whoever runs the commands (``root``: root
    installs, else the login ``user`` does), in one line naming the path, its owner and the
    fix; None when it may. ``install_dir`` is the path as given (``<remote-root><install dir>``)."""
    if root:
        return _root_refusal(listing, install_dir, user)
    return _user_refusal(listing, install_dir, user)


def _root_refusal(listing: Listing, install_dir: str, user: str) -> str | None:
    trusted = {0, listing.uid}
    base = listing.base
    fix = f"make it root's alone: chown -R root:root {install_dir} && chmod -R go-w {install_dir}"
    theirs = (
        f"if {install_dir} is {user}'s install dir (--become none), give root its own install dir, else {fix}"
        if user != "root"
        else fix
    )
    for e in listing.up:
        own = e.path in (install_dir, base)  # the install dir itself, as given and as resolved
        if e.uid not in trusted:
            if own:
                return f"{e.path} is owned by uid {e.uid}, not root, and root installs here: {theirs}"
            return (
                f"{e.path}, above the install dir, is owned by uid {e.uid}, not root: its owner could move "
                f"the install dir under root; make it root's (chown root:root {e.path} && chmod go-w "
                f"{e.path}) or install elsewhere"
            )
        if e.kind not in "dl":
            return f"{e.path}, on the way to the install dir, is not a directory"
        others = e.writable_by_others()
        if others and not (e.sticky and not own):  # a sticky /tmp: others cannot move root's entries
            where = "" if own else ", above the install dir,"
            return f"{e.path}{where} is writable by {others} (mode {e.mode}): chmod go-w {e.path}"
    if base is None:
        return None  # no install dir yet: root makes it, so it is root's
    for e in listing.inside:
        rel = _rel(e, base)
        if e.uid not in trusted:
            return f"{e.path} is owned by uid {e.uid}, not root, and root installs here: {theirs}"
        others = e.writable_by_others()
        if others:
            return f"{e.path} is writable by {others} (mode {e.mode}), and root installs here: {fix}"
        if rel == "current" and e.kind == "l" and not CURRENT.fullmatch(listing.current or ""):
            return f"{e.path} points at {listing.current!r}, not at a release, and root follows it: remove it"
        if rel in RECORDS or rel.rpartition("/")[0] in RECORD_DIRS:
            if e.kind != "-":
                return f"{e.path} is not a regular file, and root reads it as its record: remove it"
            if e.links != 1:
                return (
                    f"{e.path} has {e.links} hard links, and root trusts it as its own record: "
                    "remove it (the next deploy writes it afresh)"
                )
    if listing.odd:
        return f"a name under {install_dir} has a newline in it: remove it, then {fix}"
    return None


def _user_refusal(listing: Listing, install_dir: str, user: str) -> str | None:
    if listing.base is None:
        return None  # made by the deploy user (or refused by the board: not theirs to make)
    for e in listing.up[-1:] + listing.inside:  # the install dir itself, and what it holds
        if e.uid != listing.uid:
            who = "root's" if e.uid == 0 else f"uid {e.uid}'s"
            return (
                f"{e.path} is {who}, not {user}'s (uid {listing.uid}): {install_dir} is used by "
                f"{'root (--become, a root login or an OTA engine)' if e.uid == 0 else 'another user'}, "
                "and one install dir is never used both ways: use --become sudo (or doas), or give "
                f"{user} another install dir"
            )
    return None


def check(board: BoardSession, install_dir: str, *, writes: bool, run=None) -> None:
    """Refuse, in one line, an install dir this session may not use (see the module text).
    Root installs with ``--become`` or a root login; a deploy user's session is checked only
    where it ``writes`` (deploy, rollback): reading another's install dir changes nothing.
    ``run(argv)``: how the listing runs (the lock holder's shell, before it takes the lock);
    else ``board.run`` (the session's agent)."""
    root = board.become != "none" or board.spec.user == "root"
    if not (root or writes):
        return
    where = board.spec.name
    argv = ["sh", "-c", SCRIPT, "sh", install_dir]
    status, out, err = run(argv) if run else board.run(argv, check=False)
    if status != 0:
        said = last_line(err or out) or "no output"
        raise DeployError(f"{where}: cannot list who owns {install_dir} ({status}: {said}); nothing was changed")
    listing = parse(out.decode("utf-8", "replace"), where)
    why = refusal(listing, install_dir=install_dir, root=root or listing.uid == 0, user=board.spec.user)
    if why:
        raise DeployError(f"{where}: {why}; nothing was changed")
