"""Power cuts on the emulated board: cut QEMU's power (``SIGKILL``: whatever the guest had not
handed to the host is gone) at a seeded instant, then read the board's ext4 install disk from
outside the guest (a copy, ``e2fsck -fy`` replaying its journal as a mount would, ``debugfs
rdump``) and check what a board that boots it will find:

- ``current`` names a release whose every file matches its ``release.json``;
- the state file is readable and names the same release, or the caller expects the next run
  to reconcile it (:attr:`DiskView.state_agrees`);
- once booted, the boot service put that release's partitions into their regions
  (:func:`resident_from_disk`: QEMU reads guest memory back, byte for byte).

The campaign's numbers (``Q25_POWER_CUTS``, seeds) and its table are here too.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from q25deploy import schema

from .qemu import QemuBoard, read_physical

# per class in CI: two cuts still land in different steps of every class (docs/emulated-board.md
# has the full campaign, Q25_POWER_CUTS=30, and its figures)
CI_CUTS = 2
BASE_SEED = 24


def cuts_per_class() -> int:
    return int(os.environ.get("Q25_POWER_CUTS") or CI_CUTS)


def seeds() -> list[int]:
    """The cuts' seeds: ``Q25_POWER_CUT_SEEDS=a,b`` replays those, else BASE_SEED*1000 + 0..N-1
    (``Q25_POWER_CUT_SEED`` moves the base)."""
    listed = os.environ.get("Q25_POWER_CUT_SEEDS")
    if listed:
        return [int(s) for s in listed.split(",")]
    base = int(os.environ.get("Q25_POWER_CUT_SEED") or BASE_SEED)
    return [base * 1000 + i for i in range(cuts_per_class())]


def cut_delay(seed: int, cls: str, span: float) -> float:
    """Where in ``[0, span)`` seconds the cut falls, from the seed and the class alone."""
    return random.Random(f"{cls}/{seed}").uniform(0.0, span)


def cut_power(board: QemuBoard, timeout: float = 10.0) -> None:
    """SIGKILL our QEMU (only while its pid is the QEMU we started) and wait until it is gone."""
    if board.alive():
        os.kill(board.pid, signal.SIGKILL)
    board.stopped = True
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{board.pid}").exists() and time.monotonic() < deadline:
        try:
            os.waitpid(board.pid, os.WNOHANG)  # daemonised: not our child, this only reaps if it is
        except ChildProcessError:
            pass
        time.sleep(0.05)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class DiskView:
    """The install disk as the next boot finds it (read on the host, the guest not running)."""

    root: Path
    fsck: str  # e2fsck's exit status and its last line
    current: str | None = None  # the release id current points at
    state: dict | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def state_agrees(self) -> bool:
        return self.state is not None and self.state.get("current") == self.current

    def release(self, rid: str) -> dict:
        return json.loads((self.root / "releases" / rid / "release.json").read_text())

    def digests(self, rid: str | None) -> set[str]:
        return {f["sha256"] for f in self.release(rid)["files"]} if rid else set()

    def complete_releases(self) -> list[str]:
        """Every release directory whose files all match its release.json."""
        out = []
        for d in sorted((self.root / "releases").glob("*")):
            if not d.name.startswith(".") and not _release_problems(d):
                out.append(d.name)
        return out


def _release_problems(d: Path) -> list[str]:
    try:
        rel = schema.parse_release(json.loads((d / "release.json").read_bytes()), str(d / "release.json"))
    except (OSError, ValueError, schema.SchemaError) as e:
        return [f"{d.name}/release.json: {e}"]
    if rel["id"] != d.name:
        return [f"{d.name}/release.json describes {rel['id']}"]
    bad = []
    for f in rel["files"]:
        p = d / f["path"]
        if p.is_symlink() or not p.is_file():
            bad.append(f"{d.name}/{f['path']}: missing")
        elif p.stat().st_size != f["size"] or sha256(p) != f["sha256"]:
            bad.append(f"{d.name}/{f['path']}: differs from its sha256")
    return bad


def read_disk(disk: Path, work: Path) -> DiskView:
    """Copy ``disk``, replay its journal and check it (``e2fsck -fy``), dump it and inspect it."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    copy = work / "disk.img"
    subprocess.run(["cp", "--sparse=always", str(disk), str(copy)], check=True)
    r = subprocess.run(["e2fsck", "-fy", str(copy)], capture_output=True, text=True, timeout=120)
    lines = (r.stdout + r.stderr).strip().splitlines()
    view = DiskView(work / "root", f"{r.returncode}: {lines[-1] if lines else ''}")
    if r.returncode >= 4:  # 1 and 2: errors corrected; 4 and up: left uncorrected
        view.problems.append(f"e2fsck: {view.fsck}")
        return view
    view.root.mkdir()
    if " " in str(view.root):
        raise ValueError(f"{view.root}: debugfs takes no space in a path")
    subprocess.run(["debugfs", "-R", f"rdump / {view.root}", str(copy)], capture_output=True, check=True, timeout=120)
    copy.unlink()
    if not (view.root / "lost+found").is_dir():  # debugfs says nothing by its status
        raise RuntimeError(f"debugfs rdump of {disk} gave no file system in {view.root}")
    _inspect(view)
    return view


def _inspect(view: DiskView) -> None:
    link = view.root / "current"
    if not link.is_symlink():
        view.problems.append("no current link")
    else:
        target = os.readlink(link)
        rid = target.removeprefix("releases/")
        if target != f"releases/{rid}" or not (view.root / target).is_dir():
            view.problems.append(f"current points at {target!r}, not at a release")
        else:
            view.current = rid
            view.problems += _release_problems(view.root / target)
    state = view.root / ".q25deploy-state.json"
    try:
        view.state = schema.parse_state(json.loads(state.read_bytes()), str(state))
    except (OSError, ValueError, schema.SchemaError) as e:
        view.problems.append(f"state file unreadable: {e}")


def resident_from_disk(board: QemuBoard, view: DiskView, tmp: Path) -> list[str]:
    """What differs between guest memory (read by QEMU) and the current release's partitions
    (as its regions.tab places them): [] when every region holds its partition, then zeros."""
    rdir = view.root / "releases" / str(view.current)
    table = (rdir / "partitions" / "regions.tab").read_bytes()
    bad = []
    for row in schema.parse_region_table(table, "regions.tab"):
        ddr = read_physical(board, row["base"], row["size"], tmp / f"ddr-{row['node']}.bin")
        part = (rdir / row["file"]).read_bytes()
        if ddr[: len(part)] != part or ddr[len(part) :].strip(b"\0"):
            bad.append(f"region {row['node']} does not hold {row['file']}")
    return bad


# -- the table ----------------------------------------------------------------------------------


@dataclass
class Row:
    cls: str
    model: str
    cuts: int = 0
    survived: int = 0
    failed: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)


@dataclass
class Campaign:
    rows: dict[tuple[str, str], Row] = field(default_factory=dict)

    def record(self, cls: str, model: str, seed: int, failure: str | None) -> None:
        row = self.rows.setdefault((cls, model), Row(cls, model))
        row.cuts += 1
        row.seeds.append(seed)
        if failure:
            row.failed.append(f"seed {seed}: {failure}")
        else:
            row.survived += 1

    def cut(self, cls: str, model: str, seed: int, failure: str | None, what: str) -> None:
        """Record one cut and print a line for it: what happened (``what``), survived or why not."""
        self.record(cls, model, seed, failure)
        print(f"{cls} seed {seed}: {what}: {failure or 'survived'}")

    def table(self) -> str:
        head = f"{'class':<18} {'cut model':<12} {'cuts':>5} {'survived':>9}  seeds / what failed"
        lines = [head, "-" * len(head)]
        for row in self.rows.values():
            span = f"{min(row.seeds)}..{max(row.seeds)}" if row.seeds else "-"
            lines.append(f"{row.cls:<18} {row.model:<12} {row.cuts:>5} {row.survived:>9}  {span}")
            lines += [f"{'':<18}   {f}" for f in row.failed]
        return "\n".join(lines)


CAMPAIGN = Campaign()
