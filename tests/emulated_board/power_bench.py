"""One emulated board with a persistent ext4 install disk and its boot service, and what a
power-cut campaign does with it: run an operation, cut the power during it, read the disk from
outside, boot the same disk and check the board (the harness: emulated_board/power.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import power, write_log
from .qemu import make_disk

DTSI = "reserved-memory.dtsi"
WRITE_LOG = "write log"  # the cut model of the crash states (the table's column)
SERVICE = Path("meta-q25") / "recipes-q25" / "q25-regions" / "files" / "q25-regions"


def cli_argv(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "q25deploy", *argv]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_cli(argv: list[str], timeout: float = 600) -> tuple[int, dict]:
    """``q25deploy ARGV --json`` in its own process: (exit status, the first host's result)."""
    r = subprocess.run(cli_argv(argv), capture_output=True, text=True, timeout=timeout, env=cli_env())
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return r.returncode, {"error": (r.stdout + r.stderr)[-400:]}
    return r.returncode, doc[0] if isinstance(doc, list) else doc


@dataclass
class Bench:
    boot_board: object  # the boot_board fixture
    build: Path  # whose reserved-memory.dtsi is in the device tree and whose boot service runs
    disk: Path
    work: Path
    extra_files: dict[str, bytes] = field(default_factory=dict)
    builds: dict[str, Path] = field(default_factory=dict)  # release id -> the build it came from
    boots: int = 0
    boot_seconds: list[float] = field(default_factory=list)
    op_seconds: list[float] = field(default_factory=list)  # operations run to their end
    pending: Path | None = None  # the build the operation being cut installs

    @staticmethod
    def _holds_image(view: power.DiskView, build: Path) -> bool:
        return power.sha256(build / "tokenizer" / "tokenizer.q25tokrt") in view.digests(view.current)

    def span(self) -> float:
        """Where a cut may fall: up to a little past the operation's measured length."""
        return 1.2 * max(self.op_seconds[-3:])

    def timed(self, argv: list[str]) -> tuple[int, dict]:
        t = time.monotonic()
        out = run_cli(argv)
        self.op_seconds.append(time.monotonic() - t)
        return out

    @classmethod
    def make(cls, boot_board, build: Path, tmp: Path, extra_files: dict[str, bytes] | None = None) -> Bench:
        files = {"etc/init.d/S20q25-regions": (build / SERVICE).read_bytes(), **(extra_files or {})}
        return cls(boot_board, build, make_disk(tmp / "disk.img", 64), tmp / "views", files)

    def boot(self, *, wait: bool = True, disk: Path | None = None, write_log: Path | None = None):
        """The board on ``disk`` (default: the bench's), its writes logged to ``write_log`` if given."""
        self.boots += 1
        b = self.boot_board(
            "dropbear",
            self.build / DTSI,
            disk=disk or self.disk,
            extra_files=self.extra_files,
            wait=wait,
            write_log=write_log,
        )
        if wait:
            self.boot_seconds.append(b.boot_seconds)
        return b

    def cut_during(self, board, work: Callable[[], object] | None, delay: float) -> tuple[float, object]:
        """Run ``work()`` (None: nothing, the board is booting), cut the power ``delay`` seconds
        later; returns (the delay, what ``work`` returned if it ended before the cut, else None)."""
        box: dict[str, object] = {}

        def run() -> None:
            try:
                box["result"] = work() if work else None
            except Exception as e:  # the connection the cut broke
                box["error"] = e

        thread = threading.Thread(target=run, daemon=True)
        t = time.monotonic()
        thread.start()
        time.sleep(delay)
        result = box.get("result") if not thread.is_alive() else None
        power.cut_power(board.qemu)
        thread.join(300)
        return time.monotonic() - t, result

    def after_cut(self, tag: str, disk: Path | None = None, view: power.DiskView | None = None):
        """The disk read from outside (unless ``view`` has it), then booted: (the view, the board,
        what is wrong)."""
        view = view or power.read_disk(disk or self.disk, self.work / tag)
        problems = list(view.problems)
        board = self.boot(disk=disk)
        if view.current is None:
            return view, board, problems
        if view.current not in self.builds and self.pending and self._holds_image(view, self.pending):
            self.builds[view.current] = self.pending  # the cut operation's release, complete
        if view.current not in self.builds:
            return view, board, [*problems, f"current names {view.current}, a release no run completed"]
        serial = board.qemu.serial()
        if "q25-regions:" not in serial:
            problems.append("the boot service said nothing")
        problems += power.resident_from_disk(board.qemu, view, self.work / tag)
        code, res = run_cli(board.q25("smoke", self.builds[view.current], "--strict"))
        if code != 0 or not res.get("smoke", {}).get("ok"):
            problems.append(f"smoke --strict: {res.get('error')}")
        return view, board, problems


def missing_bounds(view: power.DiskView, files: list[dict]) -> tuple[int, int]:
    """What the next deploy of a release with ``files`` may send: at least what no complete
    release on the disk holds, at most what the current one lacks."""
    anywhere: set[str] = set()
    for rid in view.complete_releases():
        anywhere |= view.digests(rid)
    here = view.digests(view.current)
    return (
        sum(f["size"] for f in files if f["sha256"] not in anywhere),
        sum(f["size"] for f in files if f["sha256"] not in here),
    )


def streamed(board, script: str, lines: list[str]) -> int:
    """Run ``script`` on the board, appending its output lines to ``lines`` as they arrive (what
    arrived before a cut stays); returns its exit status."""
    with board.client() as c:
        _, out, _ = c.exec_command(script + " 2>&1", timeout=300)
        for line in out:
            lines.append(line.rstrip("\n"))
        return out.channel.recv_exit_status()


def board_release(board, rid: str) -> list[dict]:
    """The files of ``releases/<rid>`` on the board, after checking every one against its
    sha256 there (a run that ends on a release must leave it complete)."""
    files = json.loads(board.sh(f"cat /lib/firmware/q25/releases/{rid}/release.json")[1])["files"]
    paths = " ".join(f["path"] for f in files)
    status, out, err = board.sh(f"cd /lib/firmware/q25/releases/{rid} && sha256sum {paths}", check=False)
    got = dict(reversed(line.split()) for line in out.splitlines() if len(line.split()) == 2)
    bad = [f["path"] for f in files if got.get(f["path"]) != f["sha256"]]
    assert not bad, f"releases/{rid} after the run: {', '.join(bad)} differ from release.json ({err.strip()})"
    return files


def reconciled(view: power.DiskView, warnings: list[str]) -> str | None:
    """A state file that disagreed with current must be settled by the next run, which says so."""
    if view.state_agrees or any(("switch" in w or "current" in w) for w in warnings):
        return None
    return f"state says {view.state and view.state.get('current')}, current {view.current}: no run said so"


def crash_campaign(cls: str, bench: Bench, tmp_path: Path, logged, next_run) -> None:
    """Each seed: a crash state of the logged run (``logged``: base image, log, sector size,
    entries) checked from outside; the first ``Q25_CRASH_BOOTS`` (default 1) and every one whose
    state file disagrees with ``current`` booted, then ``next_run(board, view)`` (a failure or
    None). Every seed goes into the campaign table."""
    base, log, sectorsize, entries = logged
    failures = []
    booted = 0
    for seed in power.seeds():
        state = write_log.choose(seed, entries)
        image = write_log.build(base, log, sectorsize, entries, state, tmp_path / "crash.img")
        view = power.read_disk(image, bench.work / f"{cls}-{seed}")
        problems = list(view.problems)
        boot = not problems and (booted < int(os.environ.get("Q25_CRASH_BOOTS") or 1) or not view.state_agrees)
        if boot:
            booted += 1
            view, board, problems = bench.after_cut(f"{cls}-{seed}", disk=image, view=view)
            problems += [p for p in [None if problems else next_run(board, view)] if p]
            board.qemu.stop()
        failure = "; ".join(problems) or None
        disagrees = "" if view.state_agrees else " (state disagrees)"
        what = f"{state.describe()}: current {view.current}{disagrees}{', booted' if boot else ''}"
        power.CAMPAIGN.cut(cls, WRITE_LOG, seed, failure, what)
        if failure:
            failures.append(f"seed {seed} ({state.describe()}): {failure}")
    assert not failures, failures
