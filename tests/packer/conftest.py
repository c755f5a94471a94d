"""The BitBake tests' workspace (tests/yocto.py): one per session, shared by every module
here that runs BitBake, with every run's time in pytest's terminal summary."""

from __future__ import annotations

import pytest
from yocto import Workspace


class _Timings:
    """Every BitBake run's time in pytest's terminal summary (cold and warm parses)."""

    def __init__(self, w: Workspace):
        self.w = w

    def pytest_terminal_summary(self, terminalreporter):
        tr, w = terminalreporter, self.w
        tr.write_sep("-", f"BitBake timings ({w.root}{', kept' if w.keep else ', removed'})")
        for what, seconds, note in w.timings:
            tr.write_line(f"{seconds:7.1f} s  {what}{'  (' + note + ')' if note else ''}")
        tr.write_line(f"{sum(t for _, t, _ in w.timings):7.1f} s  total")


@pytest.fixture(scope="session")
def ws(request):
    w = Workspace.create()
    request.config.pluginmanager.register(_Timings(w), "q25-bitbake-timings")
    yield w
    w.close()
