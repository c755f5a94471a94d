"""Many boards at once: bounded concurrency (``--jobs``), one result per host, a failing host
never stops the others."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import cached_property
from pathlib import Path
from typing import Protocol

from ... import phases
from ...builddir import BuildDir
from ...common import file_sha256
from ...errors import DeployError, Interrupted, Q25Error
from ...layout import ASSETS_MANIFEST, PARTITION_MAP, RUNTIME_BIN, is_partition
from ...model.record_compare import first_prompts
from ...plugin.routing import board_hooks
from ...schema import BuildInfo
from ...tokenizer.prompts import smoke_ids
from ..state import board_release, owners
from ..state.boardfiles import STATE_NAME
from ..state.boardlock import board_session
from ..state.forward_known import verified
from ..state.release import Release, release_from_build, tokenizer_only
from ..state.reserved import refusal, unheld
from ..state.residency import PENDING, held
from ..state.residency import load as load_regions
from ..state.trusted_q25tok import Unverified, release_q25tok
from ..transport import interrupt, openssh, reach, sshboard
from ..transport.become import check as check_become
from ..transport.become import prefix as become_prefix
from ..transport.boardbase import BoardSession, known_hosts_path
from ..transport.host_result import HostResult
from ..transport.hosts import HostSpec
from .deployer import BoardFiles, deploy, failure_reason, rollback, status
from .expected import BuildIds
from .options import Options, host_list
from .smoke import plugin_checks, smoke_test

ELF_MACHINES = {62: "x86_64", 183: "aarch64", 40: "armv7l", 243: "riscv64"}


def elf_arch(path: Path) -> str:
    head = path.read_bytes()[:20]
    if head[:4] != b"\x7fELF":
        raise DeployError(f"{path}: --runtime-bin is not an ELF executable")
    return ELF_MACHINES.get(int.from_bytes(head[18:20], "little"), f"machine {int.from_bytes(head[18:20], 'little')}")


class Fleet:
    def __init__(
        self,
        opts: Options,
        target,
        pm,
        pending: dict[str, sshboard.PendingLogin] | None = None,
        build: BuildDir | None = None,
    ) -> None:
        """``pending``: logins already under way (host name → :func:`sshboard.begin_login`),
        adopted by those hosts' sessions; :meth:`run` ends any that is not. ``build``: the
        build directory as the command checked it before any login (else read on first use)."""
        self.opts, self.target, self.pm = opts, target, pm
        self._build = build
        self.pending = dict(pending or {})
        # the one source of board paths: the layer installs there too
        image_layout = board_hooks(pm, target).q25deploy_image_layout(board=target.board)
        self.install_dir, self.runtime = image_layout.install_dir, image_layout.runtime
        self.image_name = image_layout.filename
        # system paths on the board (never under --remote-root): the board file says where
        self.board_paths = {"memory": target.board.memory_device, "device_tree": target.board.device_tree_path}
        self.extra_checks = plugin_checks(pm, target)  # a broken hook: each board's one failed check
        self.hosts = host_list(opts, target.board.ssh_user, target.board.ssh_port)
        self.become = opts.become or target.board.ssh_become
        become_prefix(self.become)  # a bad --become is a usage error before any board is contacted
        self.watch: Watch = NoWatch()  # each board's phases, planned and sent bytes, end (the CLI's progress)
        self.bugs: list[str] = []  # "host: error" of each board whose run raised an unexpected exception
        self.interrupted = False  # Ctrl-C stopped the run (interrupt.py): the CLI exits 130
        self.past_switch: set[str] = set()  # boards whose switch had begun: they completed it

    # -- shared by all hosts, read once (through the schema: a tampered build is refused) ------
    @property
    def build(self) -> BuildDir:
        assert self.opts.build_dir is not None  # read only for a command given --build (or deploy's default)
        if self._build is None:
            self._build = BuildDir(self.opts.build_dir)
            self._build.check_for(self.target.board)
        return self._build

    @property
    def summary(self) -> BuildInfo:
        return self.build.info

    @property
    def partition_map(self) -> dict:
        return self.build.partition_map

    @cached_property
    def expected(self) -> BuildIds:
        """The smoke prompts' ids for the build's image (recorded by the build)."""
        return BuildIds(self.build, self.summary.image_path)

    def build_release(self) -> Release:
        rb = None
        if self.opts.runtime_bin:
            p = Path(self.opts.runtime_bin)
            if not p.is_file():
                raise DeployError(f"{p}: no such --runtime-bin")
            rb = (p, file_sha256(p))
        built_for = self.summary.install_dir
        if built_for != self.install_dir:
            raise DeployError(
                f"{self.opts.build_dir} installs to {built_for}, target {self.target.name} to "
                f"{self.install_dir}: rebuild with q25deploy build"
            )
        assert self.opts.build_dir is not None
        return release_from_build(self.opts.build_dir, rb)

    # -- per host -------------------------------------------------------------------------
    def _connect(self, spec: HostSpec) -> BoardSession:
        """The session: OpenSSH's ``ssh`` alone where it can carry it (see :mod:`.sshboard`), else
        paramiko (imported only then: fabric, paramiko and cryptography are a slow import)."""
        board: BoardSession | None = None
        why = ""
        pending = self.pending.pop(spec.name, None)
        if pending is None:
            self._known_hosts_first(spec)
        client = (
            pending.client
            if pending
            else sshboard.usable(transfer=self.opts.transfer, trust_new_host=self.opts.trust_new_host)
        )
        if client is not None:
            try:
                board = sshboard.OpenSshSession(
                    spec,
                    client,
                    identity=self.opts.identity,
                    known_hosts=self.opts.known_hosts,
                    become=self.become,
                    transfer=self.opts.transfer,
                    pending=pending,
                )
            except openssh.Unavailable as e:  # ssh cannot be told what paramiko would use, or did not log in
                board, why = None, str(e)
        if board is None:
            from ..transport.connection import ParamikoSession

            board = ParamikoSession(
                spec,
                identity=self.opts.identity,
                known_hosts=self.opts.known_hosts,
                trust_new_host=self.opts.trust_new_host,
                become=self.become,
                transfer=self.opts.transfer,
            )
            if why:
                board.notes.append(f"OpenSSH's ssh did not log in ({why}); the session went through paramiko")
        try:
            check_become(board)  # a board that would ask for a password is refused here, in one line
        except DeployError:
            board.close()
            raise
        phases.mark("login")
        self.watch.phase(spec.name, "logged in")
        return board

    def _known_hosts_first(self, spec: HostSpec) -> None:
        """Before a login that finds no known_hosts file: an unreachable board is said to be so
        (not the file's absence), and ``--trust-new-host`` creates the file (and its directory),
        empty, for the key it is about to record."""
        path = known_hosts_path(self.opts.known_hosts)
        if path.is_file() or not (self.opts.known_hosts or self.opts.trust_new_host):
            return
        reach.probe(spec)
        if self.opts.trust_new_host:
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with open(path, "a", encoding="ascii"):
                    pass
            except OSError as e:
                raise DeployError(f"{path}: cannot create the known_hosts file: {e.strerror}") from None

    def _files(self, board: BoardSession) -> BoardFiles:
        # {host} {port} {user} give each board its own root when several share a machine
        spec = board.spec
        root = (
            self.opts.remote_root.replace("{host}", spec.host)
            .replace("{port}", str(spec.port))
            .replace("{user}", spec.user)
        )
        return BoardFiles(board, root, self.install_dir)

    @contextmanager
    def _q25tok(
        self, board: BoardSession, files: BoardFiles, listed: dict | None, own: str | None = None
    ) -> Iterator[str]:
        """The q25tok this board's commands run (:mod:`.trusted_q25tok`). When the current
        release's record (``listed``: the state file's, or the image's assets) names a q25tok, a
        private copy of it: of this machine's digest when it is that one (``own``, the file this
        deploy sent, or --runtime-bin's; a board file that differs raises ``Unverified``), else
        of the digest its record names when root wrote the record. Otherwise the image's."""
        sha = ((listed or {}).get("files", {}).get(RUNTIME_BIN) or [None])[0]
        if own is None and self.opts.runtime_bin:
            own = file_sha256(Path(self.opts.runtime_bin))
        record = "-" if sha == own else files.path(STATE_NAME if files.current else ASSETS_MANIFEST)
        with ExitStack() as stack:
            q25tok = self.runtime
            if sha:
                try:
                    q25tok = stack.enter_context(release_q25tok(board, files.cur(RUNTIME_BIN), sha, record))
                except Unverified:
                    if record == "-":
                        raise
            yield q25tok

    def _smoke(
        self, board, files, image: str, expected, quick: bool, residency=None, listed=None, own=None, known=None
    ) -> dict:
        """The smoke test with the q25tok :meth:`_q25tok` chooses; one it may not run fails it.
        ``known``: the forward passes the board's state records (a deploy's; None: always run)."""
        pmap = board_release.partition_map(
            files, self.partition_map if self.opts.build_dir else None, board=self.target.board
        )
        try:
            with self._q25tok(board, files, listed, own) as q25tok:
                return smoke_test(
                    board,
                    files,
                    expected=expected,
                    partition_map=pmap,
                    image_name=image,
                    q25tok=q25tok,
                    strict=self.opts.strict,
                    extra_checks=self.extra_checks,
                    board_paths=self.board_paths,
                    quick=quick,
                    residency=residency,
                    probe=self.build.probe_digests if self.opts.build_dir else None,
                    forward=self._forward_record(),
                    known=known,
                )
        except Unverified as e:
            return {"ok": False, "checks": [{"name": "q25tok", "ok": False, "detail": str(e)}], "warnings": []}

    def _forward_record(self) -> dict | None:
        """The build's forward record cut to the prompts ``--forward`` asks for (None: no pass)."""
        record = self.build.forward_record if self.opts.build_dir else None
        n = self.opts.forward_prompts
        if record is None or n == 0:
            return None
        return first_prompts(record, n)

    @contextmanager
    def _switching(self, spec: HostSpec, board: BoardSession) -> Iterator[None]:
        """Records ``spec`` in :attr:`past_switch` when its board's switch began (it is shielded)."""
        try:
            yield
        finally:
            if board.shielded:
                self.past_switch.add(spec.name)

    def deploy_one(self, spec: HostSpec, release: Release) -> HostResult:
        with self._connect(spec) as board, self._switching(spec, board):
            files = self._files(board)
            # one deploy per board; what a cut left is settled first. One owner (root's alone where root
            # installs): checked by the lock's holder before it takes the lock (which makes the install dir)
            with files.lock(first=self._owners(board, files)):
                state, notes = files.reconcile(self.board_paths["device_tree"])
                phases.mark("lock")
                rel = tokenizer_only(release, state) if self.opts.tokenizer_only else release
                refused = None if self.opts.tokenizer_only else self._unreserved(files.live_reserved)
                if refused and not self.opts.allow_unreserved:  # before anything is sent
                    return HostResult(
                        spec.name,
                        release=rel.id,
                        build_release=rel.build_id,
                        previous=state.get("current"),
                        error=refused,
                        warnings=notes,
                    )
                notes += [f"sent anyway (--allow-unreserved): {refused}"] if refused else []
                arch = elf_arch(Path(self.opts.runtime_bin)) if self.opts.runtime_bin else self.target.board.arch
                # the release's own q25tok runs only as a private copy of what this machine sent, or of
                # what the state file this deploy writes records (one kept on the board): _q25tok
                own = next((f.sha256 for f in rel.files if f.rel == RUNTIME_BIN and f.local is not None), None)
                listed = {"files": {f.rel: [f.sha256, f.size] for f in rel.files}}

                def run(verify_links: bool) -> HostResult:
                    return deploy(
                        board,
                        files,
                        rel,
                        expect_arch=arch,
                        state=state,
                        load=self._load(board, files, own),
                        verify_links=verify_links,
                        sent=self.sent(spec),
                        progress=lambda text: self.watch.phase(spec.name, text),
                        planned=lambda n: self.watch.total(spec.name, n),
                        receivers=[self.runtime],  # the image's only: never a q25tok of the install dir
                        sending=self.expected.warm,
                        smoke=lambda quick, resident: self._smoke(
                            board, files, rel.image, self.expected.get(), quick, resident, listed, own, verified(state)
                        ),
                    )

                res = run(self.opts.verify_board)
                if not res.ok and not self.opts.verify_board and _mismatch(res) and not interrupt.requested():
                    # a region read back differs from its partition: a kept file the plan linked may
                    # have rotted on the board; hash what is linked and send again what differs
                    first = res
                    state, _ = files.reconcile()
                    res = run(True)
                    res.bytes_sent += first.bytes_sent
                    res.warnings.insert(
                        0, f"first attempt failed ({first.error}); retried with the board's kept files hashed"
                    )
                res.warnings[:0] = notes
                res.warnings += board.notes
                return res

    def smoke_one(self, spec: HostSpec) -> HostResult:
        with self._connect(spec) as board, board_session(board):
            self.watch.phase(spec.name, "smoke test")
            files = self._files(board)
            owners.check(board, files.base, writes=False)  # root runs q25tok here: on root's tree only
            state = files.read_state()
            cur = board_release.current_record(files, state, self.image_name)  # or the image's own assets
            res = HostResult(spec.name, release=state["current"] or cur.get("release"), previous=state.get("previous"))
            if self.opts.build_dir:
                if cur["vocab_fingerprint"] != self.summary.vocab_fingerprint:
                    raise DeployError(
                        f"{spec.name}: the board runs another vocabulary than {self.opts.build_dir}; "
                        "pass the build it was deployed from, or no --build"
                    )
                if cur.get("model_sha256") != self.summary.model_sha256:
                    res.warnings.append(
                        f"the board runs another model ({str(cur.get('model_sha256'))[:12]}…) "
                        f"than {self.opts.build_dir} (same vocabulary)"
                    )
                expected = self.expected.get()
            else:
                expected = smoke_ids(board_release.board_codec(files, cur))
            res.smoke = self._smoke(
                board, files, cur.get("image") or "tokenizer.q25tokrt", expected, self.opts.quick, listed=cur
            )
            res.ok = res.smoke["ok"]
            res.error = None if res.ok else f"smoke test failed: {failure_reason(res.smoke)}"
            return res

    @staticmethod
    def _owners(board: BoardSession, files: BoardFiles):
        """The owners check (:mod:`.owners`) the lock's holder runs before it takes the lock."""
        return lambda run: owners.check(board, files.base, writes=True, run=run)

    def _unreserved(self, live: dict | None) -> str | None:
        """Why the board's live reserved memory cannot hold the build's regions, or None."""
        if live is None:
            return None
        return refusal(self.partition_map["regions"], live, self.board_paths["device_tree"])

    def _reserved_status(self, files: BoardFiles, pmap_bytes: bytes | None) -> dict:
        """``reserved`` and ``unreserved`` of the current release's plan (its map: ``pmap_bytes``,
        read with the snapshot); nothing when the board has no partition map to compare (its
        status is still shown)."""
        if files.live_reserved is None:
            return {}
        try:
            fallback = self.partition_map if self.opts.build_dir else None
            pmap = (
                board_release.partition_map(files, fallback, pmap_bytes, self.target.board) if pmap_bytes else fallback
            )
            if pmap is None:
                return {}
        except DeployError:
            return {}
        why = unheld(pmap["regions"], files.live_reserved)
        return {"reserved": not why, "unreserved": [{"node": r["node"], "why": w} for r, w in why]}

    def _load(self, board: BoardSession, files: BoardFiles, own: str | None = None):
        """``q25tok load`` with the q25tok :meth:`_q25tok` chooses for the release current is
        then (after a switch, or after switching back: read from the state file). ``load(proven)``:
        the files this deploy has just sent, each hashed as the board wrote it (sha256 by name);
        when they are every partition of that release, the load compares what it reads back
        with them instead of hashing it again, and, when the smoke test runs a forward pass, it
        is left to the smoke test (:data:`~..state.residency.PENDING`), which runs it beside that pass."""

        def load(proven: Mapping[str, str] | None = None) -> dict:
            state = files.read_state()
            record = state.get("releases", {}).get(state.get("current") or "")
            parts = {rel: got[0] for rel, got in (record or {}).get("files", {}).items() if is_partition(rel)}
            compare = bool(parts) and all((proven or {}).get(rel) == sha for rel, sha in parts.items())
            if compare and self._forward_record() is not None:
                return dict(PENDING)  # the smoke test loads, beside its forward pass from the files just proven
            try:
                with self._q25tok(board, files, record, own) as q25tok:
                    return load_regions(board, files, q25tok, compare=compare, **self.board_paths)
            except Unverified as e:
                return {"state": "failed", "regions": [], "detail": str(e)}

        return load

    def sent(self, spec: HostSpec) -> BoardFlows | None:
        return None if isinstance(self.watch, NoWatch) else BoardFlows(self.watch, spec.name)

    def rollback_one(self, spec: HostSpec) -> HostResult:
        with self._connect(spec) as board, self._switching(spec, board):
            files = self._files(board)
            with files.lock(first=self._owners(board, files)):
                self.watch.phase(spec.name, "switching back and loading the regions")
                return rollback(board, files, load=self._load(board, files))

    def status_one(self, spec: HostSpec) -> dict:
        with self._connect(spec) as board, board_session(board):
            self.watch.phase(spec.name, "reading the board's state and regions")
            files = self._files(board)
            owners.check(board, files.base, writes=False)
            # the partition map in the same command: what reserves and holds it is asked next
            result = status(board, files, self.board_paths["device_tree"], also=board_release.CURRENT_MAP)
            phases.mark("lock")
            pmap = files.also_read
            listed = result.get("release")
            if not result["current"] and (image := board_release.image_record(files, self.image_name)):
                files.current = ""  # nothing deployed: the board runs its image's own assets
                listed = image
                result["image"] = {k: image[k] for k in ("target", "model_sha256", "vocab_fingerprint")}
                pmap = files.read(files.cur_rel(PARTITION_MAP))
            if result["current"] or result.get("image"):
                # does the device tree reserve the current plan? does it hold the partitions?
                result.update(self._reserved_status(files, pmap))
                try:
                    with self._q25tok(board, files, listed) as q25tok:
                        verified = held(board, files, q25tok, read_back=self.opts.verify_regions, **self.board_paths)
                except Unverified as e:
                    verified = {"state": "failed", "regions": [], "detail": str(e)}
                result["residency"], result["regions"] = verified["state"], verified["regions"]
                # this boot's load record (the regions read back when they were loaded), or read back now
                result["residency_by"] = "load record" if verified.get("cached") else "read back"
            phases.mark("verify")
            return result

    # -- all hosts ------------------------------------------------------------------------
    def run(self, action: str) -> list:
        release = self.build_release() if action == "deploy" else None
        if action in ("deploy", "smoke") and self.opts.build_dir:
            _ = self.summary, self.partition_map, self.expected  # read once, before the worker threads
        if action == "smoke" and self.opts.build_dir:
            self.expected.warm()

        self.watch.add(*(h.name for h in self.hosts))
        interrupt.reset()

        def one(spec: HostSpec):
            start = time.monotonic()
            result = run_one(spec)
            if interrupt.requested() and spec.name in self.past_switch:
                interrupt.completed(result, action)
            ok = result.ok if isinstance(result, HostResult) else "error" not in result
            if isinstance(result, HostResult):
                result.seconds = round(time.monotonic() - start, 1)  # the board's time, login to its report
            self.watch.finish(spec.name, ok)
            return result

        def run_one(spec: HostSpec):
            try:
                interrupt.check()  # a board not started when Ctrl-C came is not contacted
                self.watch.phase(spec.name, "connecting")
                if action == "deploy":
                    assert release is not None
                    return self.deploy_one(spec, release)
                if action == "smoke":
                    return self.smoke_one(spec)
                if action == "rollback":
                    return self.rollback_one(spec)
                return self.status_one(spec)
            except Interrupted:
                return interrupt.stopped(spec.name, action)
            except Q25Error as e:
                if interrupt.requested() and spec.name not in self.past_switch:  # an ssh that died of Ctrl-C
                    return interrupt.stopped(spec.name, action)
                return failed(spec, " ".join(str(e).split()))
            except Exception as e:  # a bug, not the board's answer: that board's failure, the others
                if interrupt.requested() and spec.name not in self.past_switch:  # a read cut by Ctrl-C
                    return interrupt.stopped(spec.name, action)
                if os.environ.get("Q25DEPLOY_DEBUG"):  # still run and print; the CLI then exits 70
                    raise
                self.bugs.append(f"{spec.name}: {type(e).__name__}: {e}")
                return failed(
                    spec, f"internal error: {type(e).__name__}: {' '.join(str(e).split())} (a bug in q25deploy)"
                )

        def failed(spec: HostSpec, error: str):
            return {"host": spec.name, "error": error} if action == "status" else HostResult(spec.name, error=error)

        pool = ThreadPoolExecutor(max_workers=max(1, self.opts.jobs))
        try:
            futures = [pool.submit(one, spec) for spec in self.hosts]
            try:
                return interrupt.results(futures)
            except KeyboardInterrupt:  # the first Ctrl-C: every board stops where it may (a second: exit)
                self.interrupted = True
                interrupt.request(everything=action in ("smoke", "status"))  # these change nothing
                return interrupt.results(futures)
        finally:
            pool.shutdown(wait=False)
            self.close_pending()

    def close_pending(self) -> None:
        """End the logins started ahead that no session adopted."""
        while self.pending:
            self.pending.popitem()[1].close()


class Watch(Protocol):
    """Who follows the boards' progress (the CLI's live display; called from worker threads)."""

    def add(self, *names: str) -> None: ...
    def phase(self, name: str, text: str) -> None: ...
    def total(self, name: str, n: int) -> None: ...
    def file(self, name: str, rel: str, size: int) -> None: ...
    def sent(self, name: str, n: int, rel: str | None = None) -> None: ...
    def file_done(self, name: str, rel: str) -> None: ...
    def finish(self, name: str, ok: bool) -> None: ...


class BoardFlows:
    """One board's uploads for the watch (:class:`~.deployer.Flows`)."""

    def __init__(self, watch: Watch, name: str) -> None:
        self.watch, self.name = watch, name

    def start(self, rel: str, size: int) -> None:
        self.watch.file(self.name, rel, size)

    def bytes(self, rel: str):
        return lambda n: self.watch.sent(self.name, n, rel)

    def end(self, rel: str) -> None:
        self.watch.file_done(self.name, rel)


class NoWatch:
    """Nobody watches."""

    def add(self, *names: str) -> None:
        pass

    def phase(self, name: str, text: str) -> None:
        pass

    def total(self, name: str, n: int) -> None:
        pass

    def file(self, name: str, rel: str, size: int) -> None:
        pass

    def sent(self, name: str, n: int, rel: str | None = None) -> None:
        pass

    def file_done(self, name: str, rel: str) -> None:
        pass

    def finish(self, name: str, ok: bool) -> None:
        pass


def _mismatch(res: HostResult) -> bool:
    """A deploy whose regions, read back after the load, differ from their partitions."""
    return any(r.get("state") == "MISMATCH" for r in (res.residency or {}).get("regions", []))
