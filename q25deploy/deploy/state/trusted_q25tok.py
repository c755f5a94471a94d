"""Which ``q25tok`` a board command runs (docs/security.md, "the one rule").

Every board command may run as root (a root login, or ``--become``), and an install
directory may be a deploy user's (``--become none``). So the ``q25tok`` a command runs is the image's
(the board file's runtime, ``/usr/bin/q25tok``: installed by the package manager, root's), or
a release's own only as a private copy: copied into a directory ``mktemp -d`` just made (the
running user's alone), hashed there and run from there, its digest being

- the workstation's own record: the sha256 of the ``--runtime-bin`` given to this command; or
- the board's record of it, when root wrote that record: the state file (or the image's
  ``assets_manifest.json``), opened once, owned by the user the command runs as or by root
  (a login that is not root trusts what root wrote), writable by no one else, a regular file
  with one link, in a directory of that user's or root's that no one else can write, and
  naming that digest. A replacement by anyone else is theirs, and refused; a record root
  wrote elsewhere, hard-linked or moved into a directory its mover owns, is refused too
  (issue 44: root's records live where only root can write, :mod:`.owners`).

Never a path merely found in the install directory: ``<current>/q25tok``, or
``<install>/q25tok`` on a board that runs its image's assets, is not run for being there.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import DeployError
from ..transport.boardbase import BoardSession

# $1 the release's q25tok, $2 its sha256, $3 the record naming it ("-": the workstation's own):
# prints the private copy. The record is opened once (fd 4) and what is checked (owner, mode,
# one link, the digest in it) is that open file's, whatever is renamed over its name meanwhile;
# its directory must be the runner's or root's and writable by no one else (issue 44: else its
# owner could have put there a record root wrote elsewhere, hard-linked or moved in)
COPY = r"""[ -f "$1" ] && [ ! -L "$1" ] || { echo "not a regular file"; exit 3; }
if [ "$3" != - ]; then
  [ -f "$3" ] && [ ! -L "$3" ] && exec 4< "$3" || { echo "no record of it at $3"; exit 3; }
  r=$(ls -lnL "/proc/$$/fd/4") && p=$(dirname -- "$3") && d=$(ls -lnd -- "$p") || { echo "cannot list $3"; exit 3; }
  mine() { [ -O "$1" ] || [ "$(echo "$2" | awk '{print $3}')" = 0 ]; }
  mine "/proc/$$/fd/4" "$r" || { echo "$3 was not written by $(id -un) (who runs this) or root"; exit 3; }
  case "$r" in ?????w*|????????w*) echo "$3 is writable by others"; exit 3 ;; esac
  [ "$(echo "$r" | awk '{print $2}')" = 1 ] || { echo "$3 has other hard links: not a record of its own"; exit 3; }
  mine "$p" "$d" || { echo "$p (holding $3) is not $(id -un)'s (who runs this) or root's"; exit 3; }
  case "$d" in ?????w*|????????w*) echo "$p (holding $3) is writable by others"; exit 3 ;; esac
  grep -qF "\"$2\"" <&4 || { echo "$3 does not record its sha256"; exit 3; }
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/q25tok.XXXXXX") || exit 1
if cp -- "$1" "$d/q25tok" && [ "$(sha256sum < "$d/q25tok" | cut -d' ' -f1)" = "$2" ] && chmod 0700 "$d/q25tok"
then echo "$d/q25tok"; exit 0; fi
rm -rf "$d"; echo "its sha256 is not the recorded one"; exit 3"""


class Unverified(DeployError):
    """The release's q25tok on the board is not the one the workstation sent: not run."""


@contextmanager
def release_q25tok(board: BoardSession, path: str, sha256: str, record: str = "-") -> Iterator[str]:
    """A private copy of the release's ``path`` whose sha256 is ``sha256`` (the workstation's
    digest, or one the board's root-written ``record`` names), for the block's commands
    (removed after); :class:`Unverified` when the board's file or record is not that."""
    status, out, err = board.run(["sh", "-c", COPY, "sh", path, sha256, record], check=False)
    copy = out.decode("utf-8", "replace").strip()
    if status != 0 or not copy.startswith("/") or "\n" in copy:
        why = (copy or err.decode("utf-8", "replace").strip())[-160:]
        raise Unverified(f"{path} was not run: {why}")
    try:
        yield copy
    finally:
        try:
            board.run(["rm", "-rf", "--", posixpath.dirname(copy)], check=False)
        except DeployError:
            pass  # a cut connection: the error that matters is the one being raised (the copy is in /tmp)
