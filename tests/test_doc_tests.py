"""A doc that names a test as the proof of a promise names one that exists: every
``tests/FILE.py::test_name`` (and the ``…::test_name`` that continues the last file named) in
docs/*.md is a test function of that file, so docs/security.md's defect tables cannot point at a
test that was renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a node id as the docs write it: tests/….py::name, or …::name for the file named before it
NODE = re.compile(r"(tests/[\w/]+\.py|…)::(\w+)")


def named_tests(text: str) -> list[tuple[str, str]]:
    """(file, function) of every node id in ``text``, a ``…`` resolved to the file before it."""
    out, last = [], None
    for path, name in NODE.findall(text):
        if path != "…":
            last = path
        if last is not None:
            out.append((last, name))
    return out


def missing(pages: list[Path]) -> list[str]:
    problems = []
    for page in pages:
        for path, name in named_tests(page.read_text()):
            source = ROOT / path
            if not source.is_file():
                problems.append(f"{page.name}: {path} does not exist")
            elif not re.search(rf"^(async )?def {name}\(", source.read_text(), re.M):
                problems.append(f"{page.name}: {path} has no test {name}")
    return problems


def test_every_test_a_doc_names_exists():
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert not missing(pages), "\n".join(missing(pages))


def test_the_check_finds_a_test_that_is_not_there(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "`tests/test_doc_tests.py::test_every_test_a_doc_names_exists`, `…::test_gone`, `tests/nowhere.py::test_x`"
    )
    assert missing([page]) == [
        "page.md: tests/test_doc_tests.py has no test test_gone",
        "page.md: tests/nowhere.py does not exist",
    ]
