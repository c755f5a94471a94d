"""The command line is the same everywhere: MODEL positionally or as --model, and tables with a
header row."""

from __future__ import annotations

import re

import pytest

from q25deploy.cli import main
from q25deploy.cli.app import build_parser
from q25deploy.cli.common import validate


def parse(*argv):
    args = build_parser().parse_args(list(map(str, argv)))
    validate(args)
    return args


@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["export", "tokenizer", "--out", "d"],
        ["export", "tensors", "--out", "d"],
        ["build", "--target", "kv260"],
    ],
)
def test_model_positionally_or_as_an_option(command):
    assert parse(*command, "m.gguf").model == "m.gguf"
    assert parse(*command, "--model", "m.gguf").model == "m.gguf"
    assert parse(*command, "--model", "m.gguf", "m.gguf").model == "m.gguf"


@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["export", "tokenizer", "--out", "d"],
        ["export", "tensors", "--out", "d"],
        ["build", "--target", "kv260"],
    ],
)
def test_two_different_models_are_a_usage_error(capsys, command):
    with pytest.raises(SystemExit) as exc:
        parse(*command, "a.gguf", "--model", "b.gguf")
    assert exc.value.code == 2
    assert "MODEL 'a.gguf' and --model 'b.gguf' differ" in capsys.readouterr().err


def test_model_is_required_where_there_is_no_default(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["inspect", "--json"])
    assert exc.value.code == 2
    assert "the following arguments are required: MODEL" in capsys.readouterr().err
    assert parse("build", "--target", "kv260").model is None  # build has a default model


def test_inspect_with_model_option_prints_the_same(capsys, qwen25_tiny):
    assert main(["inspect", str(qwen25_tiny)]) == 0
    positional = capsys.readouterr().out
    assert main(["inspect", "--model", str(qwen25_tiny)]) == 0
    assert capsys.readouterr().out == positional


def test_targets_prints_a_header_row(capsys):
    assert main(["targets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "PLUGIN", "DDR", "DESCRIPTION"]
    names = [line.split()[0] for line in lines[1:]]
    assert {"kv260", "zcu104", "qemu"} <= set(names)
    assert all(re.match(r"\S+ +", line).end() == lines[0].index("PLUGIN") for line in lines[1:])  # aligned


def test_package_compression_choices_are_the_mender_writers():
    """``package --compression`` offers exactly what ota/mender.py writes (the parser does not
    import it: start-up stays light)."""
    from q25deploy.ota import mender

    for choice in mender.COMPRESSIONS:
        assert parse("package", "--format", "mender", "--compression", choice, "--build", "b").compression == choice
    with pytest.raises(SystemExit):
        parse("package", "--format", "mender", "--compression", "zstd", "--build", "b")
    package = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["package"]._actions if a.dest == "compression"
    )
    assert tuple(package.choices) == tuple(mender.COMPRESSIONS)
