"""tests/tiers.py in a pytest run of its own, on two xdist workers (``-n 2 --dist loadgroup``): tiers
from the fixtures a test uses, each tier's xdist group, the time per tier in the controller's
summary, and a process a test left behind stopped and named."""

from __future__ import annotations

import re
from pathlib import Path

CONFTEST = """
import pytest

pytest_plugins = ["tiers"]


@pytest.fixture(scope="session")
def ws():
    return "a BitBake workspace"


@pytest.fixture(scope="module")
def llama_reference():
    return "llama.cpp's child"
"""

TESTS = """
import subprocess
import sys


def group(request):
    mark = request.node.get_closest_marker("xdist_group")
    return mark.args[0] if mark else None


def test_quick(request):
    assert not any(request.node.get_closest_marker(t) for t in ("board", "bitbake", "reference", "campaign"))
    assert group(request) is None


def test_bitbake(ws, request):
    assert request.node.get_closest_marker("bitbake") and group(request) == "bitbake"


def test_reference(llama_reference, request):
    assert request.node.get_closest_marker("reference") and group(request) == "test_inner.py"


def test_leaves_a_process_behind():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # left behind"], start_new_session=True)
"""


def test_tiers_groups_and_cleanup_on_two_workers(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # tiers.py, as the suite's conftest loads it
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", timeout=120)
    r.assert_outcomes(passed=4)
    out = r.stdout.str()
    assert re.search(r"s  quick \(2 tests\)", out) and "s  bitbake (1 test)" in out, out
    assert "s  reference (1 test)" in out, out
    assert "processes the tests left running, stopped" in out and "# left behind" in out, out


SOLO = """
import time

import pytest


def span(name):
    t0 = time.monotonic()
    time.sleep(0.4)
    with open("spans.txt", "a") as f:
        f.write(f"{name} {t0} {time.monotonic()}\\n")


@pytest.mark.solo
def test_solo():
    span("solo")


def test_partly_alone(alone):
    span("before")
    with alone():
        span("alone")


@pytest.mark.parametrize("i", range(8))
def test_other(i):
    span(f"other{i}")
"""


def test_a_solo_test_runs_while_no_other_test_does(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    pytester.makeconftest('pytest_plugins = ["tiers"]\n')
    pytester.makeini("[pytest]\nmarkers =\n    solo: bounds a time\n")
    pytester.makepyfile(test_solo=SOLO)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", timeout=120)
    r.assert_outcomes(passed=10)
    spans = {
        n: (float(a), float(b))
        for n, a, b in (line.split() for line in (pytester.path / "spans.txt").read_text().splitlines())
    }
    for name in ("solo", "alone"):
        s0, s1 = spans[name]
        others = {n: v for n, v in spans.items() if n != name}
        assert all(b <= s0 or a >= s1 for a, b in others.values()), (name, s0, s1, spans)
    spans = {n: v for n, v in spans.items() if n not in ("solo", "alone", "before")}
    # the others did run side by side: the lock is shared between them
    others = sorted(spans.values())
    assert any(nxt[0] < cur[1] for cur, nxt in zip(others, others[1:])), others
