"""Deploy, status and rollback on one board.

On the board, under ``<remote-root><install dir>``:

    releases/<id>/            content-addressed releases (release.json describes each)
    releases/.incoming-<id>/  a release being uploaded (removed by the next run if cut)
    current -> releases/<id>  switched by one rename(2)
    .q25deploy-state.json     what is deployed: current, previous, files and digests, time
    .q25deploy-intent.json    the state a switch in progress leads to (see boardfiles)
    .q25deploy.lock           held while a deploy or rollback runs (see boardlock)
    .q25deploy-loaded         the boot and region table the reserved regions were loaded for (residency)

A deploy stages everything next to its destination: what the board lacks is sent, a few
files at a time, each hashed by the board as it writes it (one pass: ``q25tok receive``, or
``tee`` into ``sha256``, see :mod:`.receiver`); what a kept release already holds is
hard-linked. When every digest matched it ``sync``s, renames the staged release into place,
switches ``current`` and only then updates the state (an intent record first, so a cut
between the two is finished or dropped by the next run); a cut connection or a wrong digest
leaves the current release as it was.
The short commands of a deploy run through the lock holder's agent (one channel, see
:mod:`.agent`). Before the lock, :mod:`.owners` checks that the tree has one owner: root's
alone where root installs (``--become``, a root login), the deploy user's where it does. Every path goes through ``BoardFiles.path``: nothing outside the install
directory is touched. The previous release is kept for rollback; after a deploy a failed
smoke test rolls back at once, a passed one prunes older releases.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any, Protocol

from ... import phases
from ...errors import DeployError, Interrupted
from ...layout import RUNTIME_BIN
from ..state.boardfiles import STATE_NAME, BoardFiles
from ..state.forward_known import recorded
from ..state.release import STATE_FORMAT, Release, plan_transfer
from ..state.residency import PENDING
from ..transport import interrupt
from ..transport.boardbase import HASH_FILES, BoardSession
from ..transport.host_result import HostResult
from . import receiver

__all__ = ["STATE_NAME", "BoardFiles", "HostResult", "deploy", "rollback", "status"]


def _record(release: Release, when: str) -> dict:
    desc = json.loads(release.description)
    return {
        "files": {f.rel: [f.sha256, f.size] for f in release.files},
        "vocab_fingerprint": release.vocab_fingerprint,
        "model_sha256": desc.get("model_sha256"),
        "target": desc.get("target"),
        "deployed_at": when,
        "image": release.image,
    }


UPLOAD_CHANNELS = 3  # files sent at once, each on its own channel (the board hashes each as it writes it)
# $1 the releases directory, $2 the install dir (each made 0755 when deploy creates it, and so is the
# way to them: writable by its owner alone, see owners.py), their free space: "<machine> <df -Pk line or statfs a S>". BusyBox df
# skips the rootfs mount: on a board whose root is the initramfs (PetaLinux's INITRAMFS packaging)
# `df -P` fails with "can't find mount point"; statfs through `stat -f` works there (and with coreutils)
PREFLIGHT = (
    'for d in "$2" "$1"; do if [ ! -d "$d" ]; then (umask 022 && mkdir -p "$d") && chmod 0755 "$d" || exit 1; fi; done; '
    'printf "%s " "$(uname -m)"; '
    'd=$(df -Pk "$2" 2>/dev/null) && echo "$d" | tail -n 1 || stat -f -c "statfs %a %S" "$2"'
)
# $1 staging, the directories in it, "--", then "ln" pairs (existing, staged): a fresh staging
# directory with the kept files linked
# (directories 0755 whatever the login's umask: one mode for a release, whatever installs it)
PREPARE = (
    's=$1; shift; rm -rf "$s" && mkdir -p "$s" && chmod 0755 "$s" || exit 1; '
    'while [ $# -gt 0 ] && [ "$1" != -- ]; do mkdir -p "$1" && chmod 0755 "$1" || exit 1; shift; done; '
    'shift; while [ $# -gt 1 ]; do ln "$1" "$2" || exit 1; shift 2; done'
)
# $1 staging, $2 release dir, $3 "kept" when the state records that release; stdin release.json:
# described, synced, renamed into place (rdir does not exist when mv runs, so plain mv is
# rename(2): BusyBox's mv has no -T). A release dir the state does not record is what a power cut
# left of an rm -rf (a rollback's, a prune's): replaced, never taken for the release. Only a
# q25tok this deploy sent (a regular file of one link) is made 0755: one linked from a kept
# release has the mode its release gave it, and root never chmods through a link (issue 44)
PROMOTE = (
    'cat > "$1/release.json" && chmod 0644 "$1/release.json" || exit 1; '
    'q="$1/q25tok"; if [ -f "$q" ] && [ ! -L "$q" ] && [ "$(ls -ln "$q" | awk \'{print $2}\')" = 1 ]; '
    'then chmod 0755 "$q" || exit 1; fi; '
    'sync; if [ -d "$2" ] && [ "$3" = kept ]; then rm -rf "$1"; '
    'else if [ -e "$2" ]; then rm -rf "$2" || exit 1; fi; mv "$1" "$2" || exit 1; fi; sync'
)


def preflight(board: BoardSession, files: BoardFiles, *, expect_arch: str | None, need_bytes: int) -> None:
    _, out, _ = board.run(["sh", "-c", PREFLIGHT, "sh", files.path("releases"), files.base], check=False)
    words = out.decode("utf-8", "replace").split()
    arch = words[0] if words else "unknown"
    if expect_arch and arch != expect_arch:
        raise DeployError(f"{board.spec.name}: the board is {arch}, the build is for {expect_arch}")
    try:
        avail = int(words[-2]) * int(words[-1]) if words[-3] == "statfs" else int(words[4]) * 1024
    except (IndexError, ValueError):
        raise DeployError(f"{board.spec.name}: cannot read free space under {files.base} (df -Pk, stat -f)") from None
    if avail < need_bytes:
        raise DeployError(f"{board.spec.name}: needs {need_bytes:,} bytes free under {files.base}, has {avail:,}")


class Flows(Protocol):
    """Who follows the files of an upload (the CLI's progress): each file's start, its bytes
    as they go out (``bytes(rel)`` gives the upload's callback) and its end (the board has it)."""

    def start(self, rel: str, size: int) -> None: ...
    def bytes(self, rel: str) -> Callable[[int], None]: ...
    def end(self, rel: str) -> None: ...


def deploy(
    board: BoardSession,
    files: BoardFiles,
    release: Release,
    *,
    expect_arch: str | None,
    smoke: Callable[[bool, dict | None], dict],
    progress: Callable[[str], None] = lambda s: None,
    load: Callable[..., dict] | None = None,
    state: dict | None = None,
    verify_links: bool = False,
    sent: Flows | None = None,
    receivers: Sequence[str] = (),
    sending: Callable[[], None] = lambda: None,
    planned: Callable[[int], None] = lambda n: None,
) -> HostResult:
    """Deploy ``release`` (call under ``files.lock()``; ``state`` as ``files.reconcile()`` gave it):
    stage what the board lacks (hashed on the board as it is written), promote it, switch,
    smoke-test, then prune older releases or roll back. ``load`` puts the current release's
    partitions into their reserved regions (after the switch, and again after switching back);
    after the switch it is given the files this deploy sent and proved, sha256 by name (``load(proven)``);
    ``smoke(quick, residency)``: quick after this deploy proved the files; ``residency`` is what
    ``load`` reported (None without it). ``verify_links``: the board
    also hashes the files it links from kept releases and any that differ is sent again.
    ``receivers``: the board's q25tok paths to try as the uploads' receiver. ``sending()`` is
    called once the release's files are on their way: the caller's own work then waits on
    nothing (a large file goes through an ``ssh`` process). ``planned(n)``: the bytes it is
    about to send (more may follow: files ``verify_links`` finds damaged). ``sent``: who
    follows each file's start, bytes and end (:class:`Flows`)."""
    res = HostResult(board.spec.name, release=release.id, build_release=release.build_id)
    if state is None:
        state, res.warnings = files.reconcile()
    res.previous = state.get("current")
    staged = ""  # what this run staged, removed when it stops before the switch
    try:
        if (
            state.get("current") == release.id
            and not verify_links
            and board.run(["test", "-d", files.release_dir(release.id)], check=False)[0] == 0
        ):
            progress("already deployed: nothing to send")
            return _check_deployed(files, res, state, smoke, load, progress)
        transfer = plan_transfer(release, state)
        planned(sum(f.size for f in transfer.uploads))
        board.expect_upload(max((f.size for f in transfer.uploads), default=0))  # an ssh login, ahead
        preflight(board, files, expect_arch=expect_arch, need_bytes=transfer.payload_bytes + (1 << 20))
        staged = files.path(f"releases/.incoming-{release.id}")
        staging, repaired, proven = _stage(
            board, files, release, transfer, res, progress, verify_links, sent, receivers, sending
        )
        phases.mark("transfer")
        progress(f"switching to release {release.id}")
        # a kept release whose damaged copy was sent again is replaced by the staging (verified
        # whole): nothing writes through the kept release's links, so its own copy is still damaged
        kept = "kept" if release.id in {state.get("current"), state.get("previous")} and not repaired else "new"
        board.run(["sh", "-c", PROMOTE, "sh", staging, files.release_dir(release.id), kept], stdin=release.description)
        if kept == "new" and release.id not in state.get("releases", {}):
            staged = files.release_dir(release.id)  # promoted, not yet switched to: still this run's
        phases.mark("flush")
        return _switch_and_test(files, release, state, res, smoke=smoke, load=load, progress=progress, proven=proven)
    except (DeployError, Interrupted) as e:  # the result keeps what was sent before it failed
        if interrupt.requested() and not board.shielded:  # Ctrl-C, or an ssh of ours that died of it
            return stopped(board, files, res, staged)
        if isinstance(e, Interrupted):
            raise
        res.error = " ".join(str(e).split())
        return res


def stopped(board: BoardSession, files: BoardFiles | None, res: HostResult, staged: str = "") -> HostResult:
    """A board that Ctrl-C stopped before its switch: what this run staged is removed (where the
    session still answers; else the next run's preflight does) and the result says the board
    is as it was."""
    if staged and files is not None:
        board.shielded = True
        try:
            if staged.startswith(files.path("releases/.incoming-")):
                board.run(["rm", "-rf", staged], check=False)
            else:
                files.remove_release(posixpath.basename(staged))
        except DeployError:
            pass  # the session is gone: preflight removes it next time
    res.ok, res.interrupted, res.state = False, True, "not changed"
    res.error = (
        f"interrupted: not changed: still on {res.previous}"
        if res.previous
        else ("interrupted: not changed: no release deployed")
    )
    return res


def _check_deployed(files: BoardFiles, res: HostResult, state: dict, smoke, load, progress) -> HostResult:
    """The release is already current: load its regions again if this boot has not (a reboot
    empties them) and smoke-test it (a forward pass it passed is recorded)."""
    if load:
        progress("loading the partitions into reserved memory")
        res.residency = load()
    phases.mark("load")
    progress("smoke test")
    res.smoke = smoke(True, res.residency)
    phases.mark("smoke")
    res.ok = res.smoke["ok"]
    res.previous = state.get("previous")
    if (with_forward := recorded(state, state["current"], res.smoke)) is not None:
        files.write_state(with_forward)
    if not res.ok:
        res.error = f"smoke test failed on the deployed release: {failure_reason(res.smoke)}"
    return res


def _stage(
    board: BoardSession,
    files: BoardFiles,
    release: Release,
    transfer,
    res: HostResult,
    progress,
    verify_links: bool,
    sent,
    receivers: Sequence[str],
    sending,
) -> tuple[str, bool, dict[str, str]]:
    """``releases/.incoming-<id>``: files the board has are hard-linked, the rest uploaded and
    hashed as they are written; a digest that differs fails the deploy (``current`` untouched).
    Also whether a kept copy was damaged and sent again, and the files sent (each proven: its
    sha256 by name)."""
    staging = files.path(f"releases/.incoming-{release.id}")

    def staged(rel: str) -> str:  # every path checked: a release file never leaves the staging directory
        return files.path(f"releases/.incoming-{release.id}/{rel}")

    links, repair = list(transfer.links), []
    if verify_links and links:  # before anything is linked: a damaged copy is sent as a new file
        repair = _bad_links(board, [(f, files.path(existing)) for f, existing in links], progress)
        links = [(f, existing) for f, existing in links if f.rel not in {r.rel for r in repair}]
        res.warnings += [f"{f.rel}: the board's kept copy differed from its sha256; sent again" for f in repair]
    pairs = [p for f, existing in links for p in (files.path(existing), staged(f.rel))]
    dirs = sorted({posixpath.dirname(staged(f.rel)) for f in release.files} - {staging})
    board.run(["sh", "-c", PREPARE, "sh", staging, *dirs, "--", *pairs])
    uploads = list(transfer.uploads) + repair
    res.files_linked = len(links)

    def one(f) -> tuple:
        if sent is None:
            progress(f"sending {f.rel}")
        else:  # the watch names the file that carries most of the bytes in flight
            sent.start(f.rel, f.size)
        with f.open() as src:
            digest = board.upload(src, f.size, staged(f.rel), progress=None if sent is None else sent.bytes(f.rel))
        if sent is not None:
            sent.end(f.rel)
        res.bytes_sent += f.size
        res.files_sent += 1
        return f, digest

    try:
        with ExitStack() as private:  # a private copy of the runtime that receives, removed after
            runtime = next((f.sha256 for f in release.files if f.rel == RUNTIME_BIN), None)
            done = receiver.choose(board, receivers, uploads, staged, one, private, runtime)  # the runtime first
            first = {f.rel for f, _ in done}
            rest = sorted((f for f in uploads if f.rel not in first), key=lambda f: -f.size)
            with ThreadPoolExecutor(max_workers=UPLOAD_CHANNELS) as pool:
                sent_now = pool.map(one, rest)
                sending()
                bad = [f.rel for f, digest in [*done, *sent_now] if digest != f.sha256]
    except DeployError:
        _drop(board, staging)
        raise
    if bad:
        _drop(board, staging)
        raise DeployError(
            f"{board.spec.name}: verify failed on the board ({', '.join(bad)}: the bytes written "
            "differ from the build's sha256); the current release is unchanged"
        )
    return staging, bool(repair), {f.rel: f.sha256 for f in uploads}


def _drop(board: BoardSession, staging: str) -> None:
    """Remove a failed staging directory if the board still answers (else the next run does)."""
    try:
        board.run(["rm", "-rf", staging], check=False)
    except DeployError:
        pass  # a cut connection: the error that matters is the one being raised


def _bad_links(board: BoardSession, kept: list[tuple], progress) -> list:
    """Of the files to link, ``(file, the board's kept copy)``, those whose copy no longer
    matches their digest: sent again as new files, not linked. The kept copy is left as it is:
    the receivers write only a new file, never through a link (issue 44)."""
    progress(f"hashing {len(kept)} kept file(s) on the board")
    _, out, _ = board.run(["sh", "-c", HASH_FILES, "sh", *[path for _, path in kept]], check=False, timeout=3600)
    lines = out.decode("utf-8", "replace").splitlines()
    got = {path: digest for digest, path in (line.split(" ", 1) for line in lines if " " in line)}
    bad = [f for f, path in kept if got.get(path) != f.sha256]
    for f in bad:
        if f.local is None and f.origin is None:
            raise DeployError(
                f"{board.spec.name}: {f.rel} on the board differs from its digest and is not in "
                "this build: deploy the whole build to repair it"
            )
    return bad


def _switch_and_test(
    files: BoardFiles, release: Release, state: dict, res: HostResult, *, smoke, load, progress, proven: dict[str, str]
) -> HostResult:
    """Switch to the release, load and smoke-test it; prune older releases when it passed, go
    back to exactly the state before this deploy (older rollback point included) when not.
    ``proven``: the files this deploy sent, each hashed as the board wrote it (sha256 by name),
    for the load after the switch (not the one after switching back)."""
    interrupt.check(files.board)  # the last point a Ctrl-C stops at: from here the switch completes
    files.board.shielded = True
    old_current = state.get("current")
    keep = {release.id, old_current} - {None}
    new_state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "current": release.id,
        "previous": old_current if old_current != release.id else state.get("previous"),
        "releases": {
            **state.get("releases", {}),
            release.id: _record(release, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
        },
    }
    res.warnings += [w for w in [files.commit(new_state)] if w]  # intent, switch, state: a cut is reconciled
    phases.mark("switch")
    if load:
        progress("loading the partitions into reserved memory")
        res.residency = load(proven)
    phases.mark("load")
    progress("smoke test")
    res.smoke = smoke(True, res.residency)  # this deploy has just proven every file it sent: not hashed again
    if (res.residency or {}).get("state") == PENDING["state"]:  # the smoke test loaded, beside its forward pass
        res.residency = res.smoke.get("residency")
    phases.mark("smoke")
    if res.smoke["ok"]:
        res.ok = True
        prune = sorted(set(new_state["releases"]) - keep)
        passed = recorded(new_state, release.id, res.smoke)  # the forward pass it passed, for the next deploy
        if prune or passed:  # older releases go (never the one current points at)
            final = passed or new_state
            files.write_state({**final, "releases": {r: i for r, i in final["releases"].items() if r in keep}})
            files.remove_release(*prune)
        return res
    if old_current and old_current != release.id and old_current in state.get("releases", {}):
        res.warnings += [w for w in [files.commit(state)] if w]
        if load:
            load()
        if release.id not in state.get("releases", {}):
            files.remove_release(release.id)
        res.rolled_back = True
        res.error = f"smoke test failed, rolled back to {old_current}: {failure_reason(res.smoke)}"
    elif not old_current and release.id not in state.get("releases", {}):
        # a first deploy that failed: nothing to go back to, and the failed release must never
        # become a later deploy's ``previous`` (a rollback target): the board goes back to no release
        files.retract(state, release.id)
        res.error = (
            f"smoke test failed (no previous release to roll back to); removed {release.id} from the board: "
            f"{failure_reason(res.smoke)}"
        )
    else:
        res.error = f"smoke test failed (no previous release to roll back to): {failure_reason(res.smoke)}"
    return res


def failure_reason(smoke: dict, limit: int = 200) -> str:
    """Why a smoke test failed, in one line for the table: the failed checks with their
    details (``q25tok info: sh: /usr/bin/q25tok: not found``)."""
    parts = []
    for c in smoke.get("checks", []):
        if not c["ok"]:
            detail = " ".join(str(c.get("detail") or "").split())
            parts.append(f"{c['name']}: {detail}" if detail else c["name"])
    text = "; ".join(parts) or "no check ran"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rollback(
    board: BoardSession, files: BoardFiles, state: dict | None = None, load: Callable[[], dict] | None = None
) -> HostResult:
    """Back to the previous release (call under ``files.lock()``)."""
    res = HostResult(board.spec.name)
    if state is None:
        state, res.warnings = files.reconcile()
    prev, cur = state.get("previous"), state.get("current")
    if not prev or prev not in state.get("releases", {}):
        raise DeployError(f"{board.spec.name}: no previous release to roll back to")
    new_state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "current": prev,
        "previous": None,
        "releases": {prev: state["releases"][prev]},
    }
    interrupt.check(board)  # Ctrl-C stops a rollback up to here; its switch, once begun, completes
    board.shielded = True
    warning = files.commit(new_state)
    if warning:
        res.warnings.append(warning)
    if load:
        res.residency = load()
    if cur and cur != prev:
        files.remove_release(cur)  # not if current still points at it
    res.ok, res.release, res.previous = True, prev, cur
    return res


def status(board: BoardSession, files: BoardFiles, device_tree: str | None = None, also: str | None = None) -> dict:
    """The board's releases; with ``device_tree``, its reserved memory is read in the same command
    (``files.live_reserved``), and so is ``also`` (``files.also_read``)."""
    state, pending, link = files.snapshot(device_tree, also)  # a pending switch: the next deploy or rollback settles it
    cur = state.get("current")
    return {
        "host": board.spec.name,
        "current": cur,
        "previous": state.get("previous"),
        "current_link": f"releases/{link}" if link else None,
        "consistent": link == cur and pending is None,
        "pending_switch": pending["current"] if pending else None,
        "release": state.get("releases", {}).get(cur or ""),
    }
