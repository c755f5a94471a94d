"""Measurements live in docs/benchmarks.md, not in the code: no docstring or comment in
q25deploy/ or plugins/ states a measured duration ("took 0.15 s here", "from 0.35 s to
0.26 s", "3x slower"), which goes stale the day the code around it changes. A duration that is
a specification (a timeout, a limit, a wait) is no measurement and passes."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "q25deploy", ROOT / "plugins"]

NUMBER = r"(?<![\w.])\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?"
DURATION = re.compile(NUMBER + r"\s?(?:s|ms|µs|us|ns|sec|seconds?|minutes?|min)\b")
# a ratio of times ("3x slower", "1.7x as long"): a measurement whatever its words
RATIO = re.compile(NUMBER + r"\s?[x×]\s(?:faster|slower|as long|as fast|the time)\b")
# the words that make a duration beside them a measured one
MEASURED = re.compile(
    r"\b(?:takes?|took|taking|costs?|costing|faster|slower|measured|best of|median|here|"
    r"on this machine|on loopback|against|instead of|of CPU|of Python|start-up|from .{0,40}?\bto\b)\b|→|->",
    re.I,
)
# the sentence ends at a full stop, a semicolon or a blank line (not at a decimal point)
SENTENCE = re.compile(r"[.;!?](?=\s|$)|\n\s*\n")


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment; consecutive lines of comment alone are one."""
    out: list[tuple[int, str]] = []
    last = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            alone = tok.line.lstrip().startswith("#")  # a block of these is one text
            if alone and tok.start[0] == last + 1:
                out[-1] = (out[-1][0], f"{out[-1][1]} {text}")
            else:
                out.append((tok.start[0], text))
            last = tok.start[0] if alone else -2
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def measurements(text: str) -> list[str]:
    """The sentences of ``text`` that state a measured duration."""
    found = []
    for sentence in SENTENCE.split(text):
        sentence = " ".join(sentence.split())
        if RATIO.search(sentence) or (DURATION.search(sentence) and MEASURED.search(sentence)):
            found.append(sentence)
    return found


def offenders(files: list[Path]) -> list[str]:
    """``FILE:LINE: sentence`` of every measured duration in ``files``."""
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {sentence}"
        for path in files
        for line, text in comments_and_docstrings(path.read_text())
        for sentence in measurements(text)
    ]


def test_no_docstring_or_comment_states_a_measured_duration():
    files = sorted(p for d in SOURCES for p in d.rglob("*.py"))
    assert len(files) > 50
    found = offenders(files)
    assert not found, "move these figures to docs/benchmarks.md:\n" + "\n".join(found)


def test_the_check_finds_a_planted_measurement(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""Read once. The parse took 0.35 s here."""\n'
        "TIMEOUT = 30  # seconds: the board's answer, a specification\n"
        "# the stream's writes took 3x as long\n"
        "def f():\n"
        '    """Waits up to 10 s for the lock, then gives up. Copying went from 0.35 s to 0.26 s\n'
        '    (best of 5)."""\n'
        "# wait 2 s between tries; killed after 5 s\n"
        "RETRY = 2\n"
        "# the queries cost 5 ms before every login\n"
        "IMPORTS = ()  # paramiko: 0.2-0.3 s of start-up\n",
        encoding="utf-8",
    )
    assert [found.split(": ", 1)[1] for found in offenders([planted])] == [
        "the stream's writes took 3x as long",
        "the queries cost 5 ms before every login",
        "paramiko: 0.2-0.3 s of start-up",
        "The parse took 0.35 s here",
        "Copying went from 0.35 s to 0.26 s (best of 5)",
    ]
