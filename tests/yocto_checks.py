"""Checks on what BitBake says of a recipe (tests/bitbake_probe.py's answer): each returns
the problems it finds, so a test asserts an empty list and a failure lists them all."""

from __future__ import annotations

import hashlib
import re
from fnmatch import fnmatch
from pathlib import Path


def md5(path: str | Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def check_license(info: dict) -> list[str]:
    """LIC_FILES_CHKSUM: every file:// entry is a SRC_URI file of the recipe with that md5."""
    problems = []
    entries = re.findall(r"file://([^;\s]+);md5=([0-9a-f]+)", info["vars"]["LIC_FILES_CHKSUM"] or "")
    if not entries or not info["vars"]["LICENSE"]:
        problems.append("no LICENSE / LIC_FILES_CHKSUM")
    local = {Path(u.split(";")[0][len("file://") :]).name: p for u, p in info["src"] if u.startswith("file://")}
    for name, want in entries:
        if not local.get(name):
            problems.append(f"licence file {name} is not a SRC_URI file")
        elif md5(local[name]) != want:
            problems.append(f"licence file {name}: md5 {md5(local[name])}, LIC_FILES_CHKSUM says {want}")
    return problems


def check_sources(info: dict) -> list[str]:
    return [f"SRC_URI {u}: no such file" for u, p in info["src"] if not p or not Path(p).is_file()]


def package_of(info: dict, path: str) -> str | None:
    """The package a file installed at `path` goes to: the first in PACKAGES whose FILES
    (globs; a directory holds everything under it) match, as package.bbclass assigns them."""
    for pkg, files in info["files"]:
        for pat in files.split():
            if fnmatch(path, pat) or any(fnmatch(parent, pat) for parent in _parents(path)):
                return pkg
    return None


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def check_packaging(info: dict, expected: dict[str, str]) -> list[str]:
    """Every installed file is in a package (else do_package's installed-vs-shipped), and
    the ones in `expected` (path → package) in that one."""
    problems = [f"{p}: installed but in no package (FILES)" for p in info["install"] if package_of(info, p) is None]
    for path, pkg in expected.items():
        got = package_of(info, path)
        if got != pkg:
            problems.append(f"{path}: in package {got}, expected {pkg}")
    return problems


#: yocto-check-layer's common tests (scripts/lib/checklayer/cases/common.py) for a software
#: layer; test_security from styhead on
COMMON_TESTS = (
    "test_readme",
    "test_parse",
    "test_show_environment",
    "test_world",
    "test_world_inherit_class",
    "test_signatures",
    "test_layerseries_compat",
    "test_patches_upstream_status",
)
# unittest's verbose report of a test, through the tool's logger: the test's line
# "INFO: test_readme (common.CommonCheckLayer.test_readme)", then "INFO:  ... ok" (or on one line)
_TEST = re.compile(r"\b(test_\w+) \([\w.]+\)")
_OUTCOME = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$")


def check_layer_results(log: str) -> dict[str, str]:
    """Each test's outcome in a yocto-check-layer log (its ``--output-log``): ``ok``, ``FAIL``,
    ``ERROR``, ``skipped ...``, ``expected failure`` or ``unexpected success``."""
    found: dict[str, str] = {}
    test = None
    for line in log.splitlines():
        if m := _TEST.search(line):
            test = m.group(1)
        if test and (m := _OUTCOME.search(line)):
            found[test], test = m.group(1), None
    return found


def check_layer_problems(results: dict[str, str], tests: tuple[str, ...] = COMMON_TESTS) -> list[str]:
    """Every test of ``tests`` that did not pass or did not run, judged test by test (a summary
    alone would not say which). Scarthgap still marks test_patches_upstream_status
    ``expectedFailure``, so a layer with no malformed patch is an "unexpected success" there
    (later series dropped the marker; OE's result class counts it as a pass); anywhere else an
    unexpected success is a problem."""
    problems = []
    for test in tests:
        outcome = results.get(test)
        if outcome is None:
            problems.append(f"{test}: not run")
        elif outcome == "ok" or (test == "test_patches_upstream_status" and outcome == "unexpected success"):
            continue
        else:
            problems.append(f"{test}: {outcome}")
    return problems
