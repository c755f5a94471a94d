"""The docs cannot drift from the command line (as datasette tests its docs): every option of
every command, plugin commands included, is named in docs/commands.md under that command's
heading, every ``--option`` the README or a docs page gives a q25deploy command exists, and every
link to another page's section (``runtime.md#opening-files``) finds that heading."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from q25deploy.cli.app import build_parser

ROOT = Path(__file__).resolve().parent.parent
COMMANDS_DOC = ROOT / "docs" / "commands.md"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], set[str]]:
    """Every command path (``("qemu", "up")``) and its long options; () is the top level."""
    out = {path: set()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(commands(sub, (*path, name)))
        else:
            out[path] |= {o for o in action.option_strings if o.startswith("--")}
    return out


CLI = commands(build_parser(plugin_commands=True))
LEAVES = {
    path: opts
    for path, opts in CLI.items()
    if path and not any(other[: len(path)] == path and other != path for other in CLI)
}


def doc_sections() -> dict[tuple[str, ...], str]:
    """docs/commands.md's ``## q25deploy COMMAND`` sections by command path."""
    parts = re.split(r"^## q25deploy (.+)$", COMMANDS_DOC.read_text(), flags=re.M)
    return {tuple(parts[i].split()): parts[i + 1].split("\n## ", 1)[0] for i in range(1, len(parts), 2)}


def test_every_command_has_a_section():
    assert set(doc_sections()) == set(LEAVES)
    assert "plugins" not in LEAVES  # the walk sees the plugin commands: qemu's are leaves
    assert ("qemu", "up") in LEAVES


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_every_option_is_documented_and_every_documented_one_exists(path):
    section = doc_sections()[path]
    named = set(OPTION.findall(section))
    assert LEAVES[path] - {"--help"} <= named, f"q25deploy {' '.join(path)}: undocumented options"
    assert named <= LEAVES[path], f"q25deploy {' '.join(path)}: docs/commands.md names options it lacks"


def command_uses(text: str) -> list[tuple[tuple[str, ...], set[str]]]:
    """Each q25deploy command in ``text`` and the options it gives: in a code block line or an
    inline code span (also after ``&&``), and inline spans that start with a command's words
    and an option (``deploy --tokenizer-only``)."""
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    lines = [line for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.S) for line in block.splitlines()]
    uses = []
    for span in spans:
        m = re.match(r"((?:[a-z][a-z-]* )+)(--.*)", span)
        if m and tuple(m.group(1).split()) in LEAVES:
            uses.append((tuple(m.group(1).split()), set(OPTION.findall(m.group(2)))))
    for piece in spans + lines:
        m = re.search(r"(?:^|[\s&|;(])q25deploy(?=\s|$)((?: [a-z][a-z-]*)*)(.*)", piece)
        if m:
            words = tuple(m.group(1).split())
            path = max((p for p in CLI if words[: len(p)] == p), key=len)
            uses.append((path, set(OPTION.findall(m.group(2) + " " + " ".join(words[len(path) :])))))
    return uses


def test_every_option_the_docs_give_a_command_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        for path, opts in command_uses(page.read_text()):
            assert opts <= CLI[path] | {"--help"}, f"{page.name}: q25deploy {' '.join(path)} has no {opts - CLI[path]}"
            checked += 1
    assert checked >= 40


def test_the_check_finds_a_wrong_option():
    uses = command_uses(
        "run `q25deploy deploy --target kv260 --hots h` or `status --sv F`\n```\nq25deploy qemu up --wiat\n```\n"
    )
    assert uses == [(("status",), {"--sv"}), (("deploy",), {"--target", "--hots"}), (("qemu", "up"), {"--wiat"})]
    assert all(not opts <= CLI[path] for path, opts in uses)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_anchors(pages: list[Path]) -> list[str]:
    """Every ``[text](PAGE.md#anchor)`` link in ``pages`` whose page has no heading of that anchor."""
    problems = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([^)\s]+)\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            text = linked.read_text() if linked.is_file() else ""
            headings = {slug(h) for h in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)}
            if anchor not in headings:
                problems.append(f"{page.name}: {target}#{anchor}")
    return problems


def test_every_link_to_a_section_finds_it():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert not broken_anchors(pages)


def test_the_check_finds_a_link_to_a_section_that_is_not_there(tmp_path):
    (tmp_path / "a.md").write_text("# Speed (emulated board)\n\n## The forward pass: `q25tok generate`\n")
    page = tmp_path / "b.md"
    page.write_text("[x](a.md#speed-emulated-board) [y](a.md#the-forward-pass-q25tok-generate) [z](a.md#speed)\n")
    assert broken_anchors([page]) == ["b.md: a.md#speed"]
