"""A board's ``--dump-layers`` text against the build's forward record: agreement passes, and
the first differing step and layer is the one named."""

from __future__ import annotations

import copy
import json

import pytest
from forward_dump import dump

from q25deploy import layout
from q25deploy.model.record_compare import STATE_RTOL, first_difference, near_tie, parse_dump


@pytest.fixture(scope="module")
def record(builds) -> dict:
    return json.loads((builds["kv260"] / layout.FORWARD_RECORD).read_text())


def test_the_record_printed_as_the_board_prints_it_agrees(record):
    for p in record["prompts"]:
        assert first_difference(p, parse_dump(dump(p["steps"]))) is None


def test_a_layer_off_by_more_than_the_tolerance_is_named_with_its_step(record):
    p = record["prompts"][3]
    steps = copy.deepcopy(p["steps"])
    steps[4]["layers"][1]["values"][2] += 3 * STATE_RTOL * steps[4]["layers"][1]["norm"]
    assert str(first_difference(p, parse_dump(dump(steps)))).startswith("step 4: layer 1: value #2")
    steps = copy.deepcopy(p["steps"])
    steps[0]["layers"][0]["values"][0] *= 1 + 1e-7  # float32 summation order: within tolerance
    assert first_difference(p, parse_dump(dump(steps))) is None


def test_a_token_differs_only_at_a_near_tie_and_the_comparison_goes_past_it(record):
    p = copy.deepcopy(record["prompts"][0])
    steps = copy.deepcopy(p["steps"])
    steps[2]["token"] = steps[2]["top"][1][0]
    p["steps"][2]["margin"] = 0.5
    assert str(first_difference(p, parse_dump(dump(steps)))).startswith("step 2: token")
    assert near_tie(p, parse_dump(dump(steps))) == (
        f"near-tie at step 2: token {steps[2]['token']}, host {p['steps'][2]['token']} (margin 0.5)"
    )
    p["steps"][2]["margin"] = 1e-5  # a near-tie: the board may break it the other way
    assert first_difference(p, parse_dump(dump(steps))) is None
    # the ids are forced, so the contexts stay the same: a later step is still compared
    steps[5]["layers"][0]["norm"] *= 1 + 3 * STATE_RTOL
    assert str(first_difference(p, parse_dump(dump(steps)))).startswith("step 5: layer 0: norm ")


def test_missing_steps_and_malformed_lines(record):
    p = record["prompts"][1]
    assert first_difference(p, parse_dump(dump(p["steps"][:5]))).where == "token"
    with pytest.raises(ValueError):
        parse_dump("layer 0 norm 1 values 1 2 3 4\n")
    with pytest.raises(ValueError):
        parse_dump(dump(p["steps"]).replace("layer 1 ", "layer 7 "))


def test_non_finite_host_or_board_values_differ_and_build_finds_the_first(record):
    """Issue 45, item 2: a null (non-finite) host value is a difference, never a TypeError,
    and first_non_finite names where the host reference first went non-finite."""
    from q25deploy.model.record_compare import first_non_finite

    assert first_non_finite(record) is None
    p = copy.deepcopy(record["prompts"][2])
    board = parse_dump(dump(p["steps"]))
    p["steps"][3]["top"][1][1] = None
    assert str(first_difference(p, board)) == f"step 3: logits: logit of {p['steps'][3]['top'][1][0]} " + (
        f"{board[3]['top'][1][1]:.9g}, host nan: not finite"
    )
    p["steps"][1]["layers"][0]["values"][2] = None
    assert str(first_difference(p, board)).startswith("step 1: layer 0: value #2 of the host reference is not finite")
    p["steps"][1]["embd"]["norm"] = None
    assert str(first_difference(p, board)).startswith("step 1: embd: the host reference is not finite here")
    assert first_non_finite({"prompts": [record["prompts"][0], p]}) == "embd at step 1 of smoke prompt 1"
