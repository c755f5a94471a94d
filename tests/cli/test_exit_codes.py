"""The exit codes: one table in cli/app.py, printed by --help, equal to docs/commands.md's "Exit codes"
and consistent with the error classes mapped to them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from q25deploy.cli import main
from q25deploy.cli.app import EXIT_CODES, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_MEANINGS, exit_code_for
from q25deploy.cli.deploy import EXIT_DEPLOY
from q25deploy.errors import DeployError

COMMANDS_DOC = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def documented_exit_codes() -> dict[int, str]:
    section = COMMANDS_DOC.read_text().split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.*?) \|$", section, re.M)
    return {int(code): meaning.replace("`", "") for code, meaning in rows}


def help_exit_codes(capsys) -> dict[int, str]:
    with pytest.raises(SystemExit):
        main(["--help"])
    section = capsys.readouterr().out.split("\nexit codes:\n", 1)[1]
    codes: dict[int, str] = {}
    for line in section.splitlines():
        m = re.match(r"\s*(\d+)  (.*)", line)
        if m:
            code = int(m.group(1))
            codes[code] = m.group(2)
        elif line.strip():
            codes[code] += " " + line.strip()
    return codes


def test_exit_codes_in_help_equal_the_docs(capsys):
    assert documented_exit_codes() == EXIT_MEANINGS
    assert help_exit_codes(capsys) == EXIT_MEANINGS


def test_every_exit_code_is_documented_and_every_documented_one_is_used():
    used = {code for _cls, code in EXIT_CODES} | {0, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_DEPLOY}
    assert used == set(EXIT_MEANINGS)
    assert EXIT_DEPLOY == exit_code_for(DeployError("x"))
