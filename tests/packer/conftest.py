"""The BitBake tests' workspace (tests/yocto.py): one per session, shared by every module
here that runs BitBake, with every run's time in pytest's terminal summary; and the packages
BitBake builds from each board's layer (tests/packer/test_bitbake_build.py reads them, the
emulated board runs them: test_bitbake_board.py)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from requirements import need_program
from yocto import LAYER, RECIPES, Result, Workspace, package_layers


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


@dataclass
class Packages:
    """One board layer's packages as BitBake wrote them on one series (``debs``: a copy of its deploy/deb,
    which the next board's build replaces), the build directory and the run."""

    series: str
    board: str
    bd: object
    result: Result
    debs: Path


@pytest.fixture(scope="session")
def bitbake_packages(ws, builds, tmp_path_factory):
    """``packages(series, board)``: ``bitbake`` of the four recipes of ``board``'s layer
    through do_package_write_deb on ``series``, once per session, in the board's "package"
    build (tests/yocto.py: kv260 with its own MACHINE for the series; the qemu board with
    qemuarm64)."""
    need_program("dpkg-deb", "Debian: dpkg")
    done: dict[tuple[str, str], Packages] = {}

    def packages(series: str, board: str) -> Packages:
        if (series, board) not in done:
            bd = ws.build(series, package_layers(board))
            bd.install(board, builds[board] / LAYER)
            r = bd.bitbake(*RECIPES, label=f"bitbake {' '.join(RECIPES)} ({board})")
            problems = r.errors() + [ln for ln in r.output.splitlines() if ln.startswith("WARNING")]
            assert r.returncode == 0 and not problems, "\n".join(problems) or r.output[-4000:]
            assert re.search(
                r"Tasks Summary: Attempted \d+ tasks of which \d+ didn't need to be rerun and all succeeded", r.output
            )
            debs = tmp_path_factory.mktemp(f"debs-{series}-{board}") / "deb"
            shutil.copytree(next(bd.path.glob("tmp*/deploy/deb")), debs)
            done[series, board] = Packages(series, board, bd, r, debs)
        return done[series, board]

    return packages
