"""Power cuts that also lose the disk's write cache (issue 24, the second cut model): a full
deploy, a --tokenizer-only deploy and a rollback run once on the emulated board with its disk
behind QEMU's write log (blklogwrites, dm-log-writes' format: emulated_board/write_log.py);
then each seed builds a crash state — every write up to a flush, a random subset of the writes
after it — and checks it from outside (e2fsck, every file of ``current`` against its
release.json, the state file). A crash state whose state file disagrees with ``current`` is
booted (the next run must settle it and say so), and so are the first ``Q25_CRASH_BOOTS`` (CI: 1)
of each class: the boot service loads the release, ``smoke --strict`` passes, the next deploy
succeeds and sends only what is missing.
"""

from __future__ import annotations

import shutil

import pytest
from emulated_board import power, write_log
from emulated_board.power_bench import Bench, board_release, crash_campaign, missing_bounds, reconciled
from requirements import need_program


@pytest.fixture
def bench(boot_board, builds, q25tok_aarch64, tmp_path, campaign):
    need_program("debugfs", "Debian: e2fsprogs")
    # the image's q25tok: the boot service runs no other (docs/security.md)
    yield Bench.make(boot_board, builds["qemu"], tmp_path, extra_files={"usr/bin/q25tok": q25tok_aarch64.read_bytes()})
    print(f"\n{power.CAMPAIGN.table()}")


def _ok(bench, board, build, *extra, action="deploy"):
    code, res = bench.timed(board.q25(action, build, *extra))
    assert code == 0 and res["ok"], res.get("error")
    if action == "deploy":  # a rollback's release is the one deployed before it
        bench.builds[res["release"]] = build
    return res


def _logged(bench, board, tmp_path, operation):
    """Stop the board, keep its disk as the base, boot it behind the write log, run ``operation``
    to its end, stop it; returns (base, log, sector size, entries)."""
    board.qemu.stop()
    base = tmp_path / "base.img"
    shutil.copyfile(bench.disk, base)
    log = tmp_path / "write.log"
    logged = bench.boot(write_log=log)
    res = operation(logged)
    done_at = len(write_log.read_log(log)[1])
    logged.qemu.stop()
    sectorsize, entries = write_log.read_log(log)
    flushes = sum(1 for e in entries if e.flags & write_log.FLUSH)
    print(f"\nwrite log: {len(entries)} entries, {flushes} flushes, {log.stat().st_size:,} bytes")
    assert flushes, "the log recorded no flush: not the disk the board wrote"
    # what the run reported is on the disk when it returns: the power may go the next instant
    state = write_log.reported(entries, done_at)
    image = write_log.build(base, log, sectorsize, entries, state, tmp_path / "reported.img")
    view = power.read_disk(image, bench.work / "reported")
    assert view.current == res["release"] and not view.problems, (
        f"{res['release']} reported, the disk flushed by then has {view.current} ({state.describe()}): {view.problems}"
    )
    return base, log, sectorsize, entries


def _next_deploy(bench, build, *extra):
    def run(board, view):
        code, res = bench.timed(board.q25("deploy", build, "--strict", *extra))
        if code != 0 or not res.get("ok"):
            return f"the next deploy failed: {res.get('error')}"
        try:
            files = board_release(board, res["release"])
        except AssertionError as e:
            return str(e)
        low, high = missing_bounds(view, files)
        if not low <= res["bytes_sent"] <= high:
            return f"the next deploy sent {res['bytes_sent']:,} bytes, not between {low:,} and {high:,}"
        return reconciled(view, res.get("warnings", []))

    return run


def test_crash_states_of_a_full_deploy(bench, builds, build_b, q25tok_aarch64, tmp_path):
    rt = ("--runtime-bin", str(q25tok_aarch64))
    board = bench.boot()
    _ok(bench, board, builds["qemu"], *rt)
    logged = _logged(bench, board, tmp_path, lambda b: _ok(bench, b, build_b, "--strict", *rt))
    crash_campaign("deploy", bench, tmp_path, logged, _next_deploy(bench, build_b, *rt))


def test_crash_states_of_a_tokenizer_only_deploy(bench, builds, build_a2, q25tok_aarch64, tmp_path):
    board = bench.boot()
    _ok(bench, board, builds["qemu"], "--runtime-bin", str(q25tok_aarch64))
    logged = _logged(bench, board, tmp_path, lambda b: _ok(bench, b, build_a2, "--tokenizer-only", "--strict"))
    crash_campaign("tokenizer-only", bench, tmp_path, logged, _next_deploy(bench, build_a2, "--tokenizer-only"))


def test_crash_states_of_a_rollback(bench, builds, build_b, q25tok_aarch64, tmp_path):
    rt = ("--runtime-bin", str(q25tok_aarch64))
    board = bench.boot()
    _ok(bench, board, builds["qemu"], *rt)
    _ok(bench, board, build_b, *rt)
    logged = _logged(bench, board, tmp_path, lambda b: _ok(bench, b, build_b, action="rollback"))

    def next_run(b, view):
        """A rollback the cut came before is run again (it settles the state and says so)."""
        if bench.builds.get(view.current) is not build_b:
            return _next_deploy(bench, build_b, *rt)(b, view)
        code, res = bench.timed(b.q25("rollback", build_b))
        if code != 0 or not res.get("ok"):
            return f"the next rollback failed: {res.get('error')}"
        return reconciled(view, res.get("warnings", []))

    crash_campaign("rollback", bench, tmp_path, logged, next_run)


def test_crash_states_of_the_boot_services_load(bench, builds, q25tok_aarch64, tmp_path):
    """The boot is the logged operation: the boot service loads current's partitions into the
    regions and records the load on the disk (.q25deploy-loaded); every crash state boots into
    the same release, loaded again where its record of the load was lost."""
    rt = ("--runtime-bin", str(q25tok_aarch64))
    board = bench.boot()
    release = _ok(bench, board, builds["qemu"], *rt)["release"]
    logged = _logged(bench, board, tmp_path, lambda b: {"release": release})
    crash_campaign("boot-load", bench, tmp_path, logged, lambda b, view: reconciled(view, []))
