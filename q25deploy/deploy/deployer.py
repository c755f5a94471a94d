"""Deploy, status and rollback on one board.

On the board, under ``<remote-root><install dir>``:

    releases/<id>/            content-addressed releases (release.json describes each)
    releases/.incoming-<id>/  a release being uploaded (removed by the next run if cut)
    current -> releases/<id>  switched by one rename(2)
    .q25deploy-state.json     what is deployed: current, previous, files and digests, time
    .q25deploy-intent.json    the state a switch in progress leads to (see boardfiles)
    .q25deploy.lock           held while a deploy or rollback runs (see boardlock)

A deploy stages everything next to its destination, has the board verify every sha256,
``sync``s, renames the staged release into place, switches ``current`` and only then
updates the state (an intent record first, so a cut between the two is finished or
dropped by the next run); a cut connection or a failed verify leaves the current release
as it was. Every path goes through ``BoardFiles.path``: nothing outside the install
directory is touched. The previous release is kept for rollback; after a deploy a failed
smoke test rolls back at once.
"""

from __future__ import annotations

import io
import json
import posixpath
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import DeployError
from .boardfiles import STATE_NAME, BoardFiles
from .connection import Board
from .release import STATE_FORMAT, Release, plan_transfer

__all__ = ["STATE_NAME", "BoardFiles", "HostResult", "deploy", "rollback", "status"]


@dataclass
class HostResult:
    host: str
    ok: bool = False
    bytes_sent: int = 0
    files_sent: int = 0
    files_linked: int = 0
    release: str | None = None
    previous: str | None = None
    smoke: dict | None = None
    rolled_back: bool = False
    residency: dict | None = None  # q25tok load after the switch (see residency.py)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def _record(release: Release, when: str) -> dict:
    desc = json.loads(release.description)
    return {"files": {f.rel: [f.sha256, f.size] for f in release.files}, "vocab_fingerprint": release.vocab_fingerprint,
            "model_sha256": desc.get("model_sha256"), "target": desc.get("target"), "deployed_at": when,
            "image": release.image}


def preflight(board: Board, files: BoardFiles, *, expect_arch: str | None, need_bytes: int) -> None:
    _, out, _ = board.run(["uname", "-m"])
    arch = out.decode().strip()
    if expect_arch and arch != expect_arch:
        raise DeployError(f"{board.spec.name}: the board is {arch}, the build is for {expect_arch}")
    board.run(["mkdir", "-p", files.path("releases")])
    # BusyBox df skips the rootfs mount: on a board whose root is the initramfs (PetaLinux's
    # INITRAMFS packaging) `df -P` fails with "can't find mount point"; statfs through
    # `stat -f` works there (and with coreutils)
    _, out, _ = board.run(["sh", "-c", 'df -Pk "$1" 2>/dev/null || stat -f -c "statfs %a %S" "$1"', "sh", files.base],
                          check=False)
    try:
        last = out.decode().strip().splitlines()[-1].split()
        avail = int(last[1]) * int(last[2]) if last[0] == "statfs" else int(last[3]) * 1024
    except (IndexError, ValueError):
        raise DeployError(f"{board.spec.name}: cannot read free space under {files.base} (df -Pk, stat -f)") from None
    if avail < need_bytes:
        raise DeployError(f"{board.spec.name}: needs {need_bytes:,} bytes free under {files.base}, has {avail:,}")


def deploy(board: Board, files: BoardFiles, release: Release, *, expect_arch: str | None,
           smoke: Callable[[], dict], progress: Callable[[str], None] = lambda s: None,
           load: Callable[[], dict] | None = None, state: dict | None = None) -> HostResult:
    """Deploy ``release`` (call under ``files.lock()``; ``state`` as ``files.reconcile()`` gave it):
    stage what the board lacks, verify it there, promote it, switch, smoke-test, then prune
    older releases or roll back. ``load`` puts the current release's partitions into their
    reserved regions (after the switch, and again after switching back)."""
    res = HostResult(board.spec.name, release=release.id)
    if state is None:
        state, res.warnings = files.reconcile()
    res.previous = state.get("current")
    if state.get("current") == release.id and board.run(["test", "-d", files.release_dir(release.id)],
                                                         check=False)[0] == 0:
        progress("already deployed: nothing to send")
        return _check_deployed(res, state, smoke, load)
    transfer = plan_transfer(release, state)
    preflight(board, files, expect_arch=expect_arch, need_bytes=transfer.payload_bytes + (1 << 20))
    staging = _stage(board, files, release, transfer, res, progress)
    _verify_and_promote(board, files, release, staging)
    return _switch_and_test(files, release, state, res, smoke=smoke, load=load, progress=progress)


def _check_deployed(res: HostResult, state: dict, smoke: Callable[[], dict], load) -> HostResult:
    """The release is already current: load its regions again (a reboot empties them) and smoke-test."""
    if load:
        res.residency = load()
    res.smoke = smoke()
    res.ok = res.smoke["ok"]
    res.previous = state.get("previous")
    if not res.ok:
        res.error = f"smoke test failed on the deployed release: {failure_reason(res.smoke)}"
    return res


def _stage(board: Board, files: BoardFiles, release: Release, transfer, res: HostResult, progress) -> str:
    """``releases/.incoming-<id>``: files the board has are hard-linked, the rest uploaded."""
    staging = files.path(f"releases/.incoming-{release.id}")

    def staged(rel: str) -> str:  # every path checked: a release file never leaves the staging directory
        return files.path(f"releases/.incoming-{release.id}/{rel}")

    board.run(["rm", "-rf", staging])
    dirs = sorted({posixpath.dirname(staged(f.rel)) for f in release.files} | {staging})
    board.run(["mkdir", "-p", *dirs])
    if transfer.links:
        pairs = []
        for f, existing in transfer.links:
            pairs += [files.path(existing), staged(f.rel)]
        board.run(["sh", "-c", 'while [ $# -gt 0 ]; do ln "$1" "$2" || exit 1; shift 2; done', "sh", *pairs])
    for f in transfer.uploads:
        progress(f"sending {f.rel} ({f.size:,} bytes)")
        with f.open() as src:
            res.bytes_sent += board.upload(src, f.size, staged(f.rel))
        res.files_sent += 1
    res.files_linked = len(transfer.links)
    board.upload(io.BytesIO(release.description), len(release.description), staged("release.json"))
    if any(f.rel == "q25tok" for f in release.files):
        board.run(["chmod", "0755", staged("q25tok")])
    return staging


def _verify_and_promote(board: Board, files: BoardFiles, release: Release, staging: str) -> None:
    """The board checks every staged file (uploaded and linked) against the release's digests,
    then the staged directory becomes ``releases/<id>``; a failure leaves ``current`` as it was."""
    checklist = "".join(f"{f.sha256}  {f.rel}\n" for f in release.files).encode()
    # (plain -c: GNU's --strict/--quiet are not in BusyBox's sha256sum)
    status, out, err = board.run(["sh", "-c", 'cd "$1" && sha256sum -c -', "sh", staging],
                                 stdin=checklist, check=False)
    if status != 0:
        board.run(["rm", "-rf", staging], check=False)
        lines = (out + err).decode("utf-8", "replace").strip().splitlines()
        bad = [ln for ln in lines if "FAIL" in ln] or lines
        raise DeployError(f"{board.spec.name}: verify failed on the board ({bad[0] if bad else status}); "
                          "the current release is unchanged")
    board.run(["sync"])
    # rdir does not exist when mv runs, so plain mv is rename(2) (BusyBox's mv has no -T)
    board.run(["sh", "-c", 'if [ -d "$2" ]; then rm -rf "$1"; else mv "$1" "$2"; fi', "sh", staging,
               files.release_dir(release.id)])
    board.run(["sync"])


def _switch_and_test(files: BoardFiles, release: Release, state: dict, res: HostResult, *, smoke, load,
                     progress) -> HostResult:
    """Switch to the release, load and smoke-test it; prune older releases when it passed, go
    back to exactly the state before this deploy (older rollback point included) when not."""
    old_current = state.get("current")
    keep = {release.id, old_current} - {None}
    new_state = {"format": STATE_FORMAT, "current": release.id,
                 "previous": old_current if old_current != release.id else state.get("previous"),
                 "releases": {**state.get("releases", {}),
                              release.id: _record(release, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))}}
    res.warnings += [w for w in [files.commit(new_state)] if w]  # intent, switch, state: a cut is reconciled
    if load:
        progress("loading the partitions into reserved memory")
        res.residency = load()
    progress("smoke test")
    res.smoke = smoke()
    if res.smoke["ok"]:
        res.ok = True
        prune = set(new_state["releases"]) - keep
        if prune:
            files.write_state({**new_state, "releases": {r: i for r, i in new_state["releases"].items() if r in keep}})
            for rid in prune:  # older releases go (never the one current points at)
                files.remove_release(rid)
        return res
    if old_current and old_current != release.id and old_current in state.get("releases", {}):
        res.warnings += [w for w in [files.commit(state)] if w]
        if load:
            load()
        if release.id not in state.get("releases", {}):
            files.remove_release(release.id)
        res.rolled_back = True
        res.error = f"smoke test failed, rolled back to {old_current}: {failure_reason(res.smoke)}"
    else:
        res.error = f"smoke test failed (no previous release to roll back to): {failure_reason(res.smoke)}"
    return res


def failure_reason(smoke: dict, limit: int = 200) -> str:
    """Why a smoke test failed, in one line for the table: the failed checks with their
    details (``q25tok info: timeout: can't execute '/usr/bin/q25tok': …``)."""
    parts = []
    for c in smoke.get("checks", []):
        if not c["ok"]:
            detail = " ".join(str(c.get("detail") or "").split())
            parts.append(f"{c['name']}: {detail}" if detail else c["name"])
    text = "; ".join(parts) or "no check ran"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rollback(board: Board, files: BoardFiles, state: dict | None = None,
             load: Callable[[], dict] | None = None) -> HostResult:
    """Back to the previous release (call under ``files.lock()``)."""
    res = HostResult(board.spec.name)
    if state is None:
        state, res.warnings = files.reconcile()
    prev, cur = state.get("previous"), state.get("current")
    if not prev or prev not in state.get("releases", {}):
        raise DeployError(f"{board.spec.name}: no previous release to roll back to")
    new_state = {"format": STATE_FORMAT, "current": prev, "previous": None,
                 "releases": {prev: state["releases"][prev]}}
    warning = files.commit(new_state)
    if warning:
        res.warnings.append(warning)
    if load:
        res.residency = load()
    if cur and cur != prev:
        files.remove_release(cur)  # not if current still points at it
    res.ok, res.release, res.previous = True, prev, cur
    return res


def status(board: Board, files: BoardFiles) -> dict:
    state = files.read_state()
    _, out, _ = board.run(["readlink", files.path("current")], check=False)
    link = out.decode().strip()
    cur = state.get("current")
    pending = files.read_intent()  # a switch an earlier run was cut in: the next deploy or rollback settles it
    return {"host": board.spec.name, "current": cur, "previous": state.get("previous"),
            "current_link": link or None, "consistent": ((link == f"releases/{cur}") if cur else link == "")
            and pending is None, "pending_switch": pending["current"] if pending else None,
            "release": state.get("releases", {}).get(cur or "")}
