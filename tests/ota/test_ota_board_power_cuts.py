"""Power cuts during an OTA install on the emulated board (issue 24): the board script
(q25-ota.sh) runs on the board the way the engines call it — as the Mender update module
(ArtifactInstall, ArtifactCommit, Cleanup) and as SWUpdate's script (preinst, its files handler
writing the payload to the drop directory, postinst) — and the power goes at a seeded instant.
The clients themselves run on the host (test_ota_real_*.py); the board has no mender or swupdate,
so this drives the script as they do, and recovers as they do after a cut: Mender rolls back an
update it had not committed, then cleans up; SWUpdate has no recovery, the next install runs.
The same disk then boots into a complete release, the boot service loads it, ``smoke
--strict`` passes, the state file agrees with ``current`` and the next install succeeds.
"""

from __future__ import annotations

import io
import re
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from emulated_board import power, write_log
from emulated_board.power_bench import Bench, crash_campaign, streamed
from ota_helpers import cpio_members, mender_tree, package
from requirements import need_program

MODEL = "SIGKILL"
INSTALL = "/lib/firmware/q25"
MODULE = "/tmp/q25-release"  # the update module, as /usr/share/mender/modules/v3 has it
TREE = "/tmp/tree"  # the module's file tree (files/ from the artifact's data/0000)
SWU = "/tmp/swu"  # the .swu's members, read by the files handler


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o600
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _unpack(board, where: str, files: dict[str, bytes]) -> None:
    board.put("/tmp/payload.tar", _tar(files))
    board.sh(f"rm -rf {where} && mkdir -p {where} && tar -xf /tmp/payload.tar -C {where} && rm /tmp/payload.tar")


class Mender:
    """The update module's states as the Mender client runs them, on the board."""

    name = "mender"

    def __init__(self, builds: list[Path], tmp: Path):
        self.trees = []
        for i, b in enumerate(builds):
            tree = mender_tree(package(b, "mender", tmp / f"{i}.mender"), tmp / f"tree-{i}")
            self.trees.append({p.relative_to(tree).as_posix(): p.read_bytes() for p in tree.rglob("*") if p.is_file()})
        from q25deploy.resources import OTA_SCRIPT as SCRIPT

        self.script = SCRIPT.read_bytes()

    def prepare(self, board, i: int) -> None:
        board.put(MODULE, self.script, "0755")
        _unpack(board, TREE, self.trees[i % 2])
        board.sh(f"mkdir -p {TREE}/tmp")

    def install_for(self, i: int) -> str:
        m = f"{MODULE} %s {TREE}"
        return (
            f"{m % 'ArtifactInstall'} && echo q25-cut: installed && "
            f"{{ {m % 'ArtifactCommit'} && echo q25-cut: committed || {m % 'ArtifactRollback'}; }}; "
            f"{m % 'Cleanup'}; echo q25-cut: cleaned"
        )

    def recover(self, board, lines: list[str], i: int) -> None:
        """After the power comes back: an update not committed is rolled back, then cleaned up."""
        self.prepare(board, i)
        m = f"{MODULE} %s {TREE}"
        if "q25-cut: committed" not in lines:
            board.sh(m % "ArtifactRollback")
        board.sh(m % "Cleanup")


class SWUpdate:
    """``swupdate -i``: the script with preinst, the files to their paths, the script with postinst."""

    name = "swupdate"

    def __init__(self, builds: list[Path], tmp: Path):
        self.swus = []
        for i, b in enumerate(builds):
            data = package(b, "swupdate", tmp / f"{i}.swu").read_bytes()
            members = {n: data[o : o + s] for n, (o, s) in cpio_members(data).items()}
            desc = members["sw-description"].decode()
            paths = re.findall(r'filename = "([^"]+)";\s*path = "([^"]+)";', desc)
            self.swus.append(({n: members[n] for n, _ in paths} | {"q25-ota.sh": members["q25-ota.sh"]}, paths))

    def prepare(self, board, i: int) -> None:
        files, _ = self.swus[i % 2]
        _unpack(board, SWU, files)

    def install_for(self, i: int) -> str:
        _, paths = self.swus[i % 2]
        copies = " && ".join(f"cp {SWU}/{n} {p}" for n, p in paths)  # the files handler
        s = f"sh {SWU}/q25-ota.sh"
        return f"{s} preinst && {copies} && {s} postinst && echo q25-cut: installed"

    def recover(self, board, lines: list[str], i: int) -> None:
        pass  # SWUpdate keeps no record of an update a cut interrupted


def _settled(board) -> str | None:
    status, out, _ = board.sh(
        f'readlink {INSTALL}/current; sed -n \'s/^ *"current": "\\([0-9a-f]*\\)",*$/\\1/p\' '
        f"{INSTALL}/.q25deploy-state.json",
        check=False,
    )
    link, _, state = out.strip().partition("\n")
    return None if link == f"releases/{state.strip()}" else f"current is {link}, the state file says {state!r}"


def _next_install(board, eng, i: int) -> str | None:
    """After the engine's recovery: the install again succeeds and leaves the state agreeing with
    current; where the recovery left them apart (a cut between the switch and the state write:
    SWUpdate keeps no record), that install settles it and says so."""
    apart = _settled(board)
    again: list[str] = []
    eng.prepare(board, i)
    if streamed(board, eng.install_for(i), again) != 0:
        return f"the next install failed: {again[-3:]}"
    if apart and not any("finished the switch" in line for line in again):
        return f"{apart}, and the next install did not say it settled that"
    return _settled(board)


@pytest.mark.parametrize("engine", [Mender, SWUpdate], ids=["mender", "swupdate"])
def test_power_cuts_during_an_ota_install(campaign, engine, boot_board, ota_builds, q25tok_aarch64, tmp_path):
    need_program("debugfs", "Debian: e2fsprogs")
    builds = [ota_builds["B"], ota_builds["A"]]
    eng = engine(builds, tmp_path / "packages")
    bench = Bench.make(
        boot_board, ota_builds["A"], tmp_path, extra_files={"usr/bin/q25tok": q25tok_aarch64.read_bytes()}
    )
    board = bench.boot()

    def install(b, i: int, lines: list[str]) -> int:
        eng.prepare(b, i)
        script = eng.install_for(i)
        return streamed(b, script, lines)

    def record(b, i: int) -> None:
        rid = b.sh(f"readlink {INSTALL}/current")[1].strip().removeprefix("releases/")
        bench.builds[rid] = builds[i % 2]

    took = []
    for i in (0, 1):  # B then A installed: the start, and both releases' ids known
        lines: list[str] = []
        t = time.monotonic()
        assert install(board, i, lines) == 0, lines
        took.append(time.monotonic() - t)
        record(board, i)
    span = 1.2 * max(took)  # the cut falls anywhere in an install, or just after it
    failures = []
    for i, seed in enumerate(power.seeds()):
        lines = []
        eng.prepare(board, i)
        script = eng.install_for(i)
        delay, status = bench.cut_during(
            board, lambda b=board, s=script, out=lines: streamed(b, s, out), power.cut_delay(seed, eng.name, span)
        )
        view, board, problems = bench.after_cut(f"{eng.name}-{seed}")
        done = "q25-cut: committed" if isinstance(eng, Mender) else "q25-cut: installed"
        if done in lines and bench.builds.get(view.current) is not builds[i % 2]:
            problems.append(f"the update was reported done before the cut, the disk has {view.current}")
        t = time.monotonic()
        if not problems:
            eng.recover(board, lines, i)
            problems += [p for p in [_next_install(board, eng, i)] if p]
            if not problems:
                record(board, i)
        failure = "; ".join(problems) or None
        ended = " (after it ended)" if status is not None else ""
        said = lines[-1] if lines else "nothing said"
        power.CAMPAIGN.cut(
            eng.name,
            MODEL,
            seed,
            failure,
            f"cut at {delay:.2f} s{ended} ({said}), boot {bench.boot_seconds[-1]:.1f} s, "
            f"the recovery and next install {time.monotonic() - t:.1f} s",
        )
        if failure:
            failures.append(f"seed {seed}: {failure}")
            break
    print(f"\n{power.CAMPAIGN.table()}")
    assert not failures, failures


@pytest.mark.parametrize("engine", [Mender, SWUpdate], ids=["mender", "swupdate"])
def test_crash_states_of_an_ota_install(campaign, engine, boot_board, ota_builds, q25tok_aarch64, tmp_path):
    """The disk behind QEMU's write log (write_log.py) during an install: what was flushed when
    the engine's last step returned holds the new release (the power may go the next instant);
    then each seed's crash state (writes after a flush dropped in a random subset) is checked
    from outside, and the first one and any whose state file disagrees with ``current`` boots:
    the boot service loads its release, the engine recovers as after a power loss (Mender rolls
    back an update it had not committed), the state agrees and the install runs again."""
    need_program("debugfs", "Debian: e2fsprogs")
    builds = [ota_builds["B"], ota_builds["A"]]
    eng = engine(builds, tmp_path / "packages")
    bench = Bench.make(
        boot_board, ota_builds["A"], tmp_path, extra_files={"usr/bin/q25tok": q25tok_aarch64.read_bytes()}
    )
    board = bench.boot()
    eng.prepare(board, 1)
    assert streamed(board, eng.install_for(1), []) == 0
    old = board.sh(f"readlink {INSTALL}/current")[1].strip().removeprefix("releases/")
    bench.builds[old] = builds[1]
    board.qemu.stop()
    base, log = tmp_path / "base.img", tmp_path / "write.log"
    shutil.copyfile(bench.disk, base)
    board = bench.boot(write_log=log)
    eng.prepare(board, 0)
    lines: list[str] = []
    assert streamed(board, eng.install_for(0), lines) == 0 and "q25-cut: installed" in lines, lines
    done_at = len(write_log.read_log(log)[1])
    new = board.sh(f"readlink {INSTALL}/current")[1].strip().removeprefix("releases/")
    board.qemu.stop()
    sectorsize, entries = write_log.read_log(log)
    state = write_log.reported(entries, done_at)
    view = power.read_disk(
        write_log.build(base, log, sectorsize, entries, state, tmp_path / "crash.img"), tmp_path / "view"
    )
    assert view.current == new and view.state_agrees and not view.problems, (
        f"{eng.name} reported {new} installed; flushed by then: {view.current} ({state.describe()}), {view.problems}"
    )
    bench.builds[new] = builds[0]

    def next_run(b, view) -> str | None:
        eng.recover(b, [], 0)  # nothing says the update was committed: Mender rolls it back
        return _next_install(b, eng, 0)

    crash_campaign(eng.name, bench, tmp_path, (base, log, sectorsize, entries), next_run)
