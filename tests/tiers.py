"""The test tiers (docs/contributing.md), as a pytest plugin of the tests (tests/conftest.py).

- A test is in a tier when it uses, directly or through other fixtures, one of the tier's
  fixtures (:data:`TIERS`): the marker is applied here, never by hand. A test in no tier is in
  the quick tier, the developer's loop.
- Each tier has its time limit (pytest-timeout, :data:`LIMITS`): a hang is that test's failure;
  the fixtures' teardown still stops its boards and servers.
- Under pytest-xdist (``-n 2 --dist loadgroup``, docs/contributing.md), every BitBake test
  runs in one worker (the workspace: parse caches, sstate) and every other tier's test with its
  module (its module-scoped fixtures); a quick test runs wherever a worker is free.
- A test marked ``solo`` (one that bounds how long something takes) runs its body while no
  other test runs, under xdist too, and a test that bounds a time in part of its body runs that
  part in ``with alone():`` (the fixture): every test holds a shared lock on the session's lock
  file, the solo body or block the exclusive one (:class:`_Solo`), so the other worker waits
  between its tests; fixtures are set up and torn down beside the other worker's tests.
- At the end: each tier's time, and any process the run left behind (found by the marker in its
  environment, so a daemonized QEMU is found too) is stopped and named.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import tempfile
import uuid
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

TIERS = {
    "board": ("_boards", "board_root"),  # the emulated board (QEMU, Debian's arm64 packages)
    "bitbake": ("ws",),  # a BitBake workspace (tests/yocto.py)
    "reference": ("llama_reference",),  # llama.cpp, in its child process
    "campaign": ("campaign",),  # power cuts, crash boots, fuzzing, yocto-check-layer, a fleet
}
QUICK = "quick"
# seconds per test, its setup, call and teardown together (pytest-timeout's whole-item timer):
# a session fixture's cold start (a board's boot, a BitBake packaging build) falls in the
# setup of the first test that uses it
LIMITS = {QUICK: 300, "reference": 600, "board": 900, "bitbake": 2400, "campaign": 1800}
SESSION_VAR = "Q25_TEST_SESSION"  # every process the tests start inherits it


def tier_of(item: pytest.Item) -> str:
    """The item's tier: the first of campaign, bitbake, board, reference it is marked with."""
    for tier in ("campaign", "bitbake", "board", "reference"):
        if item.get_closest_marker(tier) is not None:
            return tier
    return QUICK


def group_of(item: pytest.Item, tier: str) -> str | None:
    """The item's xdist group: one for BitBake, the module for another tier, none for a quick test."""
    if tier == "bitbake":
        return "bitbake"
    return None if tier == QUICK else item.nodeid.split("::", 1)[0]


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # an xdist worker; its controller reports and cleans up


def pytest_configure(config: pytest.Config) -> None:
    if not (_worker(config) and os.environ.get(SESSION_VAR)):  # a worker keeps its controller's
        os.environ[SESSION_VAR] = uuid.uuid4().hex  # a fresh one: an inner pytest run must not stop ours
    config.stash[_times] = defaultdict(float)
    config.stash[_counts] = defaultdict(int)
    config.pluginmanager.register(_Tally(config), "q25-tier-times")
    if _worker(config):
        config.pluginmanager.register(_Solo(config), "q25-solo")


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for tier, fixtures in TIERS.items():
            if used.intersection(fixtures):
                item.add_marker(tier)
        tier = tier_of(item)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LIMITS[tier]))
        group = group_of(item, tier)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        item.user_properties.append(("tier", tier))  # the report carries it to xdist's controller


_times = pytest.StashKey[dict]()
_counts = pytest.StashKey[dict]()


class _Tally:
    """Each phase's time, added to its tier, in the process that reports (xdist's controller)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tier = dict(report.user_properties).get("tier", QUICK)
        self.config.stash[_times][tier] += report.duration
        if report.when == "teardown":
            self.config.stash[_counts][tier] += 1


def solo_dir(marker: str) -> Path:
    return Path(tempfile.gettempdir()) / f"q25-solo-{marker}"


class _Solo:
    """Under xdist, each test in the run holds the run's lock file shared; a ``solo`` test's body,
    or a test's ``with alone():`` block, holds it exclusively (a test's fixtures' setup and
    teardown are not what it times, so they share the machine). The exclusive holder first takes
    the turnstile, which every test passes through before its shared lock: the other worker's
    next test waits behind it, never ahead of it."""

    def __init__(self, config: pytest.Config):
        self.dir = solo_dir(os.environ[SESSION_VAR])
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.fds: tuple[int, int] | None = None  # the running test's (turnstile, lock)

    def _open(self, name: str) -> int:
        return os.open(self.dir / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)

    @contextmanager
    def alone(self):
        """The running test's shared lock made exclusive for the block, then shared again."""
        assert self.fds is not None, "alone() outside a test"
        gate, lock = self.fds
        fcntl.flock(lock, fcntl.LOCK_UN)  # one's own shared lock would block one's exclusive one
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # waits for the other worker's test to end
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        gate, lock = self._open("turnstile"), self._open("lock")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)  # behind a test that waits to be alone
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
            self.fds = (gate, lock)
            yield
        finally:
            self.fds = None
            os.close(lock)  # closing drops the locks
            os.close(gate)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        if item.get_closest_marker("solo") is None:
            yield
            return
        with self.alone():
            yield


@pytest.fixture
def alone(request: pytest.FixtureRequest):
    """``with alone(): ...``: the block runs while no other test runs (what a ``solo`` test's
    whole body does), for a test that bounds a time in part of its body only."""
    solo = request.config.pluginmanager.get_plugin("q25-solo")
    return solo.alone if solo is not None else nullcontext


def leftovers(marker: str) -> list[tuple[int, str]]:
    """Processes other than this one whose environment carries ``marker`` (pid, command)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            if f"{SESSION_VAR}={marker}".encode() in env:
                found.append((int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]))
        except OSError:  # gone, or not ours to read
            continue
    return found


def stop_leftovers(marker: str) -> list[tuple[int, str]]:
    found = leftovers(marker)
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers
def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get(SESSION_VAR) and not _worker(session.config):  # the workers' processes too
        session.config.stash[_stopped] = stop_leftovers(os.environ[SESSION_VAR])
        shutil.rmtree(solo_dir(os.environ[SESSION_VAR]), ignore_errors=True)


_stopped = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    times, counts = config.stash[_times], config.stash[_counts]
    if times:
        terminalreporter.write_sep("-", "time per tier")
        for tier in (QUICK, "reference", "board", "bitbake", "campaign"):
            if counts.get(tier):
                n = counts[tier]
                terminalreporter.write_line(f"{times[tier]:8.1f} s  {tier} ({n} test{'' if n == 1 else 's'})")
    stopped = config.stash.get(_stopped, [])
    if stopped:
        terminalreporter.write_sep("-", "processes the tests left running, stopped")
        for pid, cmd in stopped:
            terminalreporter.write_line(f"{pid}: {cmd}")
