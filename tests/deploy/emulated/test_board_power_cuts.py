"""Power cuts on the emulated board (issue 24): the power goes (QEMU SIGKILLed) at a seeded
instant during a full deploy, a --tokenizer-only deploy, a rollback and the boot service's load
at boot; the same disk then boots into a complete release, its partitions in their regions,
``smoke --strict`` passes and the next run finishes the job sending only what is missing.

Cuts are chained: the board the checks booted runs the next operation. ``Q25_POWER_CUTS=N``
cuts per class (CI: 2); ``Q25_POWER_CUT_SEEDS=a,b`` replays seeds. The table is printed at the end.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from emulated_board import power
from emulated_board.power_bench import Bench, board_release, missing_bounds, reconciled, run_cli
from requirements import need_program

MODEL = "SIGKILL"


@pytest.fixture
def bench(boot_board, builds, q25tok_aarch64, tmp_path, campaign):
    need_program("mkfs.ext4", "Debian: e2fsprogs")
    need_program("debugfs", "Debian: e2fsprogs")
    # the image's q25tok: the boot service runs no other (docs/security.md)
    yield Bench.make(boot_board, builds["qemu"], tmp_path, extra_files={"usr/bin/q25tok": q25tok_aarch64.read_bytes()})
    print(f"\n{power.CAMPAIGN.table()}")


def _deploy(bench, board, build, *extra):
    code, res = bench.timed(board.q25("deploy", build, "--strict", *extra))
    assert code == 0 and res["ok"], res.get("error")
    bench.builds[res["release"]] = build
    return res


def _finish(bench, board, view, build, *extra, settled: bool = False) -> str | None:
    """The next deploy of ``build`` after a cut: it succeeds, settles the state (unless a run
    before it has: ``settled``), sends only what is missing."""
    code, res = bench.timed(board.q25("deploy", build, "--strict", *extra))
    if code != 0 or not res.get("ok"):
        return f"the next deploy failed: {res.get('error')}"
    bench.builds[res["release"]] = build
    try:
        files = board_release(board, res["release"])
    except AssertionError as e:
        return str(e)
    low, high = missing_bounds(view, files) if view.current else (0, 1 << 40)
    if not low <= res["bytes_sent"] <= high:
        return f"the next deploy sent {res['bytes_sent']:,} bytes, not between {low:,} and {high:,}"
    return None if settled else reconciled(view, res.get("warnings", []))


def _campaign(cls: str, bench, board, operation, finish, target=None) -> None:
    """Each seed: ``operation(i)`` -> (argv or None, span); cut, check, ``finish(i, board, view)``.
    ``target(i)``: the build whose release the operation installs (a cut may leave it current)."""
    failures = []
    for i, seed in enumerate(power.seeds()):
        argv, span = operation(i, board)
        bench.pending = target(i) if target else None
        if argv is None:  # the boot itself is the operation
            board.qemu.stop()
            board = bench.boot(wait=False)
        work = (lambda a=argv: run_cli(a)) if argv else None
        delay, result = bench.cut_during(board, work, power.cut_delay(seed, cls, span))
        ended = result is not None
        view, board, problems = bench.after_cut(f"{cls}-{seed}")
        if ended and result[0] == 0 and result[1].get("release") and view.current != result[1]["release"]:
            problems.append(f"{result[1]['release']} was deployed before the cut, the disk has {view.current}")
        t = time.monotonic()
        failure = "; ".join(problems) or finish(i, board, view)
        took = time.monotonic() - t
        what = f"cut at {delay:.2f} s{' (after it ended)' if ended else ''}"
        power.CAMPAIGN.cut(
            cls, MODEL, seed, failure, f"{what}, boot {bench.boot_seconds[-1]:.1f} s, the next run {took:.1f} s"
        )
        if failure:
            failures.append(f"seed {seed}: {failure}")
            break  # the board is not in a state the next cut may start from
    assert not failures, failures


def test_power_cuts_during_a_full_deploy(bench, builds, build_b, q25tok_aarch64):
    rt = ("--runtime-bin", str(q25tok_aarch64))
    board = bench.boot()
    _deploy(bench, board, builds["qemu"], *rt)
    pair = [build_b, builds["qemu"]]

    def operation(i, b):
        return b.q25("deploy", pair[i % 2], "--strict", *rt), bench.span()

    _campaign(
        "deploy",
        bench,
        board,
        operation,
        lambda i, b, view: _finish(bench, b, view, pair[i % 2], *rt),
        lambda i: pair[i % 2],
    )


def test_power_cuts_during_a_tokenizer_only_deploy(bench, builds, build_a2, q25tok_aarch64):
    board = bench.boot()
    _deploy(bench, board, builds["qemu"], "--runtime-bin", str(q25tok_aarch64))
    pair = [build_a2, builds["qemu"]]

    def operation(i, b):
        return b.q25("deploy", pair[i % 2], "--tokenizer-only", "--strict"), bench.span()

    _campaign(
        "tokenizer-only",
        bench,
        board,
        operation,
        lambda i, b, v: _finish(bench, b, v, pair[i % 2], "--tokenizer-only"),
        lambda i: pair[i % 2],
    )


def test_power_cuts_during_a_rollback(bench, builds, build_b, q25tok_aarch64):
    rt = ("--runtime-bin", str(q25tok_aarch64))
    board = bench.boot()
    _deploy(bench, board, builds["qemu"], *rt)
    _deploy(bench, board, build_b, *rt)

    def operation(i, b):
        return b.q25("rollback", build_b), 8.0  # a rollback: a few commands and a load

    def finish(i, b, view):
        """Roll back if the cut came before the switch (that run settles the state and says so),
        then deploy B again."""
        if bench.builds.get(view.current) != build_b:
            return _finish(bench, b, view, build_b, *rt)
        code, res = run_cli(b.q25("rollback", build_b))
        if code != 0 or not res.get("ok"):
            return f"the next rollback failed: {res.get('error')}"
        rolled = replace(view, current=res["release"])  # what the deploy after it starts from
        return reconciled(view, res.get("warnings", [])) or _finish(bench, b, rolled, build_b, *rt, settled=True)

    _campaign("rollback", bench, board, operation, finish)


def test_power_cuts_during_the_boot_services_load(bench, builds, q25tok_aarch64):
    board = bench.boot()
    _deploy(bench, board, builds["qemu"], "--runtime-bin", str(q25tok_aarch64))
    span = 1.5 * max(bench.boot_seconds)  # launch to SSH, the load included (it runs before the SSH server)

    def operation(i, b):
        return None, span

    _campaign("boot-load", bench, board, operation, lambda i, b, view: reconciled(view, []))
