"""A model whose host reference forward pass is not finite (issue 45, item 2): a valid GGUF
with one block scale that is float16 inf (what a broken quantiser writes). ``build`` makes
it, and says on stderr which layer of the host reference first goes non-finite; ``--strict``
makes that warning an error (exit 1, docs/commands.md)."""

from __future__ import annotations

import json

import pytest
from quant_blocks import NAN_F16, with_scale

from q25deploy.cli.app import main


@pytest.fixture(scope="module")
def broken(qwen25_tiny, tmp_path_factory):
    p = tmp_path_factory.mktemp("broken") / "broken.gguf"
    with_scale(qwen25_tiny, p, "blk.1.attn_q.weight")
    return p


WARNING = "q25deploy: warning: the host reference forward pass is not finite from layer 1 (blk.1.*) at step 0 of smoke prompt 0"


def test_build_names_the_layer_that_goes_non_finite(broken, tmp_path, capsys):
    assert main(["build", "--target", "kv260", "--model", str(broken), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert WARNING in err, err
    # up to date: the warning again (the build is as broken as it was)
    assert main(["build", "--target", "kv260", "--model", str(broken), "--out", str(tmp_path / "b"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert WARNING in err and json.loads(out)["warnings"][0].startswith("the host reference forward pass"), (out, err)


def test_strict_fails_the_build_naming_the_layer(broken, tmp_path, capsys):
    nan = tmp_path / "nan.gguf"
    with_scale(broken, nan, "blk.0.ffn_down.weight", NAN_F16)
    code = main(
        ["build", "--target", "kv260", "--model", str(nan), "--out", str(tmp_path / "b"), "--strict", "--quiet"]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith("q25deploy: error: the host reference forward pass is not finite from layer 0 (blk.0.*)"), err
    assert "(--strict)" in err and "Traceback" not in err


def test_a_finite_model_builds_without_a_warning(qwen25_tiny, tmp_path, capsys):
    assert main(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(tmp_path), "--strict"]) == 0
    assert "warning" not in capsys.readouterr().err
