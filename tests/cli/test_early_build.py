"""The build's command line as read before its modules load (q25deploy/cli/early_build.py): the
same options as the parser's, the same request as the parser's reading gives the build, and
nothing where argparse may read the line otherwise."""

from __future__ import annotations

import argparse

import pytest

from q25deploy.cli import early_build
from q25deploy.cli.build import requested
from q25deploy.cli.common import validate
from q25deploy.cli.main import build_parser
from q25deploy.packer.pipeline import request


def _build_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser(False)._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["build"]


def test_the_scan_knows_builds_options_as_the_parser_does():
    mine: dict[str, bool] = {}
    for action in _build_parser()._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt != "--help":
                mine[opt] = action.nargs != 0
    assert {o for o, v in mine.items() if v} == early_build.VALUED
    assert {o for o, v in mine.items() if not v} == early_build.FLAGS


def _parsed(argv: list[str]) -> tuple[dict, str | None]:
    """The request and output folder as the parser's reading hands them to the build."""
    a = build_parser(False).parse_args(argv)
    validate(a)  # MODEL or --model: args.model
    asked = request(a.target, **requested(a))
    return asked, (str(a.out) if a.out else f"q25-build/{a.target}" if a.target else None)


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--target", "kv260", "--model", "m.gguf", "--out", "o", "--json"],
        ["build", "m.gguf", "--target=kv260"],
        ["build", "--target", "kv260", "m.gguf", "--model", "m.gguf", "--quiet"],
        ["build", "--target-file", "b.toml", "--model=qwen2.5:0.5b", "--out=x/y"],
        [
            "build", "--target", "zcu104", "--model", "m.gguf", "--reserve", "768MiB", "--layer-release", "3",
            "--layer-maintainer", " Ann <a@b.c> ", "--model-license", "Apache-2.0", "--model-license-file", "L",
        ],
        ["build", "--target", "kv260", "--model", "a.gguf", "--model", "b.gguf"],  # the last one counts
    ],
)  # fmt: skip
def test_the_scan_reads_what_the_parser_reads(argv):
    opts = early_build.scan(argv)
    assert opts is not None
    assert early_build.request(opts) == _parsed(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["deploy", "--target", "kv260"],
        ["build", "--tar", "kv260", "--model", "m.gguf"],  # an abbreviation argparse would take
        ["build", "--target", "kv260", "-h"],
        ["build", "--target", "--model", "m.gguf"],  # a value that is an option
        ["build", "--target", "kv260", "--", "m.gguf"],
        ["build", "--target", "kv260", "a.gguf", "b.gguf"],  # two positionals: argparse refuses
        ["build", "--target", "kv260", "--out="],
        ["build", "--target", "kv260", "--host", "h"],  # another command's option
    ],
)
def test_the_scan_reads_nothing_where_argparse_may_read_otherwise(argv):
    assert early_build.scan(argv) is None and early_build.begin_build(argv) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--target", "kv260", "m.gguf", "--model", "other.gguf"],  # MODEL and --model differ
        ["build", "--target", "kv260", "--model", "m.gguf", "--reserve", "lots"],
        ["build", "--target", "kv260", "--model", "m.gguf", "--layer-release", "x1"],
        ["build", "--target", "kv260", "--model", "m.gguf", "--layer-maintainer", "a\nb"],
    ],
)
def test_values_the_parser_refuses_start_nothing(argv):
    opts = early_build.scan(argv)
    assert opts is not None and early_build.request(opts) is None and early_build.begin_build(argv) is None
