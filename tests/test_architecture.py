"""docs/architecture.md is held: lint-imports keeps pyproject's layers contract, the contract's
layers are the document's, no module imports itself round a circle, and the document names
every module."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib
from requirements import need_module

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("q25deploy", "q25deploy_plugins")


def contract_layers() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c["layers"] for c in contracts if c["type"] == "layers")


def graph():
    grimp = need_module("grimp", "pip install '.[test]' (import-linter)")
    return grimp.build_graph(*PACKAGES)


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for start in sorted(imports):
        if start in index:
            continue
        work = [(start, iter(sorted(imports[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(imports.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_circles_finds_a_planted_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_lint_imports_keeps_every_contract():
    need_module("importlinter", "pip install '.[test]' (import-linter)")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_module_imports_itself_round_a_circle():
    g = graph()
    imports = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert circles(imports) == []


def test_the_document_lists_the_contracts_layers():
    """The document's "Layers" list, top to bottom, is the contract's."""
    text = DOC.read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    listed = [" | ".join(re.findall(r"`([^`]+)`", line)) for line in section.splitlines() if re.match(r"\d+\. ", line)]
    assert listed == contract_layers()


def test_the_document_names_every_module():
    """Outside the picture, each module is named in backticks: its path under the package
    (``deploy/ops/fleet``, ``packer.layer``) or its own name in its subpackage's paragraph."""
    prose = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.S)
    words = {w for span in re.findall(r"`([^`]+)`", prose) for w in re.split(r"[\s,()/.:⟨⟩]+", span)}
    missing = [
        m for m in sorted(graph().modules) if m not in PACKAGES and m.rsplit(".", 1)[-1] not in words | {"__init__"}
    ]
    assert missing == [], f"docs/architecture.md does not name {missing}"
