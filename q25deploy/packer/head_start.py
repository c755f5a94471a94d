"""A served build's copy, started before the command line's modules load.

A build the plan cache serves (:mod:`.plan_cache`) into a new directory is, but for a few small
files, the copy of the model's tensors into their partitions, as long as ``cp`` of the GGUF.
Loading the command line, the plugins and the target, reading the model's digest and checking
the cache entry would otherwise come before the copy could start (docs/benchmarks.md has the
build's phases). So ``q25deploy build`` starts the copy first (:func:`start`, called by
:mod:`q25deploy.cli` before anything else loads) and makes every check it always makes
while the bytes move:

- the head start reads the command line as argparse would (:mod:`q25deploy.cli.early_build`) and
  the request record the last build of the same request left in the plan cache
  (:func:`~.plan_cache.recall`): which entry it was built as, and what that build read. When
  nothing of that changed (the quick check's comparison, :mod:`.quick`: the board file's
  bytes, the model's, the licence file's and the plugins' modules' size and time, the
  ``sys.path`` folders), it looks the entry up (every check of
  :func:`~.plan_cache.lookup`) and copies its partitions into the temporary sibling of DIR
  that the build will commit (:class:`~.outputs.OutputDir`), in a child process: it shares
  no interpreter lock with the imports;
- the build then resolves the target and the model and computes the entry's key as it always
  does. It adopts the copy (:meth:`HeadStart.take`) only for the same directory, model and
  key; anything else stops the copy and removes its directory (:meth:`HeadStart.discard`), and
  the build goes on as if there had been no head start.

Only a DIR that does not exist yet, in a folder that does, gets a head start: an existing build
may lend its partitions by hard links (nothing to copy), and nothing is created that the build
would not create. Nothing but that temporary directory is written before the checks.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import phases
from ..errors import Q25Error
from . import plan_cache, quick
from .outputs import OutputDir
from .payload import Packed, pack


class ForkedCopy:
    """The partitions of an entry being copied by a child process (a thread where the process
    already runs threads: forking those is unsafe). ``result()``/``cancel()`` as
    :class:`~.plan_cache.Copy`."""

    def __init__(self, entry: plan_cache.Entry, model_path: Path, o: OutputDir) -> None:
        self.entry, self.model_path, self.o = entry, model_path, o
        self.paths = [str(o.path(f)) for f in entry.files]
        self.pid, self._thread_copy = 0, None
        if not hasattr(os, "fork") or threading.active_count() > 1:
            self._thread_copy = plan_cache.Copy(entry, model_path, o)
            return
        self._r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: copy, say how, and leave without running anything else
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.close(self._r)
                done = self._pack()
                os.write(w, f"{done.shared} {done.copied}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)

    def result(self) -> Packed:
        """How the copy went; where the child failed, the copy is made again here (and its
        error, a full disk say, raises as the build's own would)."""
        if self._thread_copy is not None:
            return self._thread_copy.result()
        said = self._reap()
        try:
            shared, copied = (int(x) for x in said.split())
            return Packed(None, {}, [], shared, copied, 0)
        except ValueError:
            return self._pack()

    def _pack(self) -> Packed:
        """The copy itself, in this process: the child's work, or the parent's where it failed."""
        return pack(
            str(self.model_path), self.entry.pieces, self.paths, self.entry.sizes, hash_pieces=False, hash_outputs=False
        )

    def cancel(self) -> None:
        """Stop the copy and wait until nothing writes any more."""
        if self._thread_copy is not None:
            self._thread_copy.cancel()
        elif self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def _reap(self) -> str:
        """The child's report ("" where it failed or was stopped), once it has exited."""
        if not self.pid:
            return ""
        try:
            with os.fdopen(self._r, "rb") as f:
                said = f.read(64)
            _, status = os.waitpid(self.pid, 0)
        finally:
            self.pid = 0
        return said.decode("ascii", "replace") if os.waitstatus_to_exitcode(status) == 0 else ""


@dataclass
class HeadStart:
    """A copy under way into ``o``, for the entry (``model_sha``, ``key``) built into ``out``."""

    out: Path
    model_sha: str
    key: str
    entry: plan_cache.Entry
    o: OutputDir
    copy: ForkedCopy
    taken: bool = False

    def take(self, out: Path, model_sha: str, key: str) -> HeadStart | None:
        """This head start for the build of entry (``model_sha``, ``key``) into ``out``; None
        (and the copy discarded) for any other."""
        if self.taken:
            return None
        if (Path(os.path.abspath(out)), model_sha, key) != (self.out, self.model_sha, self.key):
            self.discard()
            return None
        self.taken = True
        return self

    def discard(self) -> None:
        """Stop the copy and remove its directory: called once the build ended, however it
        ended (the directory of a build that committed is DIR by then, and nothing is removed;
        one that failed before it could is removed here)."""
        self.taken = True
        self.copy.cancel()
        shutil.rmtree(self.o.tmp, ignore_errors=True)


def start(asked: dict, out: Path | str | None) -> HeadStart | None:
    """The head start of a build of ``asked`` (the request as :func:`~q25deploy.packer.pipeline.build`
    forms it) into ``out``, or None where there is none to be had (see the module text)."""
    if out is None or not asked.get("model") or not (asked.get("target") or asked.get("target_file")):
        return None
    dest = Path(os.path.abspath(out))
    if os.path.lexists(dest) or not dest.parent.is_dir():
        return None
    from ..model.source import resolve

    try:
        src = resolve(asked["model"])
        hit = plan_cache.recall(quick.request(asked, src.path))
        if hit is None:
            return None
        entry = plan_cache.lookup(hit[1], hit[0], src.path.stat().st_size)
        if entry is None:
            return None
        o = OutputDir(dest, "build")
    except (Q25Error, OSError):  # the build meets it again, and says so in its order
        return None
    try:
        head = HeadStart(dest, hit[0], hit[1], entry, o, ForkedCopy(entry, src.path, o))
        phases.mark("head start")
        return head
    except OSError:
        shutil.rmtree(o.tmp, ignore_errors=True)
        return None
