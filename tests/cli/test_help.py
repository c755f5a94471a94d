"""Every command's ``--help``, found by walking the parser (not a list kept by hand)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from q25deploy.cli import main
from q25deploy.cli.app import build_parser


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of the top-level parser and every sub-command, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


COMMANDS = [path for path, _ in walk(build_parser())]


def test_the_walk_finds_every_command():
    assert {
        ("inspect",),
        ("build",),
        ("targets",),
        ("deploy",),
        ("smoke",),
        ("status",),
        ("rollback",),
        ("export", "tokenizer"),
        ("export", "tensors"),
        ("export", "fixtures"),
        ("tokenize",),
        ("detokenize",),
        ("runtime", "build"),
        ("qemu", "up"),
        ("qemu", "down"),
        ("qemu", "status"),
    } <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "q25deploy")
def test_help_exits_0_and_describes_every_argument(capsys, path):
    with pytest.raises(SystemExit) as exc:
        main([*path, "--help"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and err == ""
    assert out.startswith(" ".join(("usage: q25deploy", *path)))
    parser = dict(walk(build_parser()))[path]
    assert parser.description, f"{' '.join(path)}: no description"
    for action in parser._actions:
        name = "/".join(action.option_strings) or action.metavar or action.dest
        assert action.help and action.help != argparse.SUPPRESS, f"{' '.join(path)} {name}: no help"
        for choice in getattr(action, "_choices_actions", ()):
            assert choice.help, f"{' '.join(path)} {choice.dest}: no help"


def test_every_command_that_reads_a_model_takes_it_both_ways():
    readers = []
    for path, parser in walk(build_parser()):
        dests = {a.dest: a for a in parser._actions}
        if "model" in dests or "model_option" in dests:
            readers.append(path)
            assert not dests["model"].option_strings and dests["model_option"].option_strings == ["--model"]
    assert set(readers) == {
        ("inspect",),
        ("build",),
        ("export", "tokenizer"),
        ("export", "tensors"),
        ("export", "fixtures"),
    }


HEAVY = (
    "numpy",
    "gguf",
    "paramiko",
    "fabric",
    "pluggy",
    "q25deploy.model",
    "q25deploy.tokenizer",
    "q25deploy.board",
    "q25deploy.plugin",
    "q25deploy.packer",
    "q25deploy.deploy",
    "q25deploy_plugins",
)


@pytest.mark.parametrize("argv", [["build", "--help"], ["deploy", "--help"], ["tokenize", "--help"]], ids=" ".join)
def test_help_imports_no_heavy_modules(argv):
    """Start-up time: a core command's parser and --help import nothing the handlers need, not
    even the plugins (``q25deploy --help`` and plugin commands load them: they list and parse
    the plugins' commands)."""
    code = (
        f"import sys\nfrom q25deploy.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in {HEAVY!r})))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.splitlines()[-1] == "[]"


def _help_lines(parser: argparse.ArgumentParser, monkeypatch) -> dict[str, int]:
    """Each option's (and argument's) help as ``--help`` prints it in 80 columns: lines each."""
    monkeypatch.setenv("COLUMNS", "80")
    text = parser.format_help()
    out: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # an option's first line
            current = line.split()[0].rstrip(",")
            out[current] = 1 if re.search(r"\S  +\S", line.strip()) else 0  # help on the same line
        elif line.startswith(" " * 10) and current:
            out[current] += 1
        else:
            current = None
    return out


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "q25deploy")
def test_every_help_line_is_at_most_three_lines(path, monkeypatch):
    parser = dict(walk(build_parser()))[path]
    long = {opt: n for opt, n in _help_lines(parser, monkeypatch).items() if n > 3}
    assert not long, f"q25deploy {' '.join(path)}: help over three lines (the detail goes to docs/commands.md)"


#: each board command's option groups, named for it (issue 45, item 8: smoke listed its
#: options under "what to deploy")
GROUPS = {
    "deploy": ["what to deploy", "where: the boards", "how: login and checks", "output"],
    "smoke": ["what to check the boards against", "where: the boards", "how: login and checks", "output"],
    "status": ["what to compare the boards with", "where: the boards", "how: login", "output"],
    "rollback": ["what the boards run", "where: the boards", "how: login", "output"],
}


@pytest.mark.parametrize("command", ["deploy", "smoke", "status", "rollback"])
def test_the_board_commands_group_their_options(command):
    parser = dict(walk(build_parser()))[(command,)]
    groups = [g.title for g in parser._action_groups if g._group_actions]
    assert groups[-4:] == GROUPS[command]
    where = next(g for g in parser._action_groups if g.title == "output")
    assert {"--json", "--quiet"} <= {o for a in where._group_actions for o in a.option_strings}


def _help_of(command: str, option: str) -> str:
    parser = dict(walk(build_parser()))[(command,)]
    return next(a.help for a in parser._actions if option in a.option_strings)


@pytest.mark.parametrize("command", ["smoke", "status", "rollback"])
def test_only_deploy_says_runtime_bin_is_sent(command):
    """smoke, status and rollback send nothing: their --runtime-bin is the digest the release's
    q25tok is run by (deploy/ops/fleet.py's _q25tok), and their --build is not sent either."""
    assert "send" in _help_of("deploy", "--runtime-bin")
    text = _help_of(command, "--runtime-bin")
    assert "nothing is sent" in text and "sha256" in text and not text.startswith("send")
    assert "send" not in _help_of(command, "--build").replace("nothing is sent", "")


@pytest.mark.parametrize("command", ["deploy", "smoke"])
def test_strict_says_every_smoke_warning_fails(command):
    """--strict turns every warning of the smoke test into a failure (deploy/ops/smoke.py's
    _Report.warn: device tree, residency, probe, forward pass), not only a missing
    device tree; tests/deploy/ops/test_board_report.py runs it."""
    text = _help_of(command, "--strict")
    assert text.startswith("every smoke-test warning fails the test")
    assert ("rolls back" in text) == (command == "deploy")
