"""The board's comparison of `q25tok generate --dump-layers` with the payload's forward file
(`q25tok compare`, q25tok_compare.c: what q25-ota.sh's smoke test runs) against the host's
(q25deploy/model/record_compare.py): the same verdict, the same line, on the tiny model's real
record and board outputs derived from it, and the forward files it refuses."""

from __future__ import annotations

import copy
import json
import random
import subprocess
from pathlib import Path

import pytest

from q25deploy.model import forward_expect
from q25deploy.model.record_compare import LOGIT_ATOL, STATE_RTOL, first_difference, near_tie, parse_dump


@pytest.fixture(scope="module")
def prompt(ota_builds) -> dict:
    return json.loads((ota_builds["A"] / "forward_record.json").read_text())["prompts"][0]


def c_style(steps: list[dict]) -> str:
    """Lines as q25tok generate prints them: %.9g floats, %.17g norms (not the repr the payload
    uses), nan for what is not finite."""

    def g(v, digits=9):
        return "nan" if v is None else f"{v:.{digits}g}"

    out = []
    for s, st in enumerate(steps):
        out.append(f"step {s} pos {st['position']} token {st['token']} margin {g(st['margin'])}")
        out.append("top " + " ".join(f"{i} {g(v)}" for i, v in st["top"]))
        for what, x in [("embd", st["embd"]), *((f"layer {n}", x) for n, x in enumerate(st["layers"]))]:
            out.append(f"{what} norm {g(x['norm'], 17)} values {' '.join(g(v) for v in x['values'])}")
        out.append(f"output norm {g(st['output']['norm'], 17)} values {' '.join(g(v) for v in st['output']['values'])}")
    return "\n".join(out) + "\n"


def scaled(x: dict, key: str, by: float) -> None:
    x[key] = x[key] * by


# (name, change of the board's steps, change of the host's prompt, expected (step, where) or None)
def _norm(steps, p):
    scaled(steps[0]["layers"][1], "norm", 1 + 3 * STATE_RTOL)


def _norm_within(steps, p):
    scaled(steps[0]["layers"][1], "norm", 1 + 0.5 * STATE_RTOL)


def _value(steps, p):
    st = steps[2]["output"]
    st["values"][1] += 2 * STATE_RTOL * st["norm"]


def _value_within(steps, p):
    st = steps[2]["layers"][0]
    st["values"][3] -= 0.5 * STATE_RTOL * st["norm"]


def _embd_nan(steps, p):
    steps[4]["embd"]["values"][0] = None


def _near_tie(steps, p):
    """The host's margin at step 3 is below 1e-3: the board took the runner-up; the ids are
    forced, so every later step is still the host's."""
    p["steps"][3]["margin"] = 0.5e-3
    steps[3]["token"] = p["steps"][3]["top"][1][0]


def _near_tie_then_a_layer(steps, p):
    """A near tie does not end the comparison: a later step's state still differs."""
    _near_tie(steps, p)
    steps[5]["layers"][0]["norm"] *= 2


def _clear_margin(steps, p):
    steps[1]["token"] = p["steps"][1]["top"][1][0]


def _fewer_steps(steps, p):
    del steps[5:]


def _logit(steps, p):
    i, v = steps[6]["top"][2]
    steps[6]["top"][2] = [i, v + 2 * LOGIT_ATOL * max(1.0, abs(v))]


def _top_id(steps, p):
    i, v = steps[0]["top"][4]
    steps[0]["top"][4] = [i + 1, v - 2 * LOGIT_ATOL]


def _top_ids_tied(steps, p):
    """Two of the top five with the same logit listed the other way round: not a difference."""
    p["steps"][0]["top"][3][1] = p["steps"][0]["top"][2][1]
    steps[0]["top"][3][1] = steps[0]["top"][2][1]
    steps[0]["top"][2], steps[0]["top"][3] = steps[0]["top"][3], steps[0]["top"][2]


def _layer_missing(steps, p):
    del steps[1]["layers"][1]


def _host_none(steps, p):
    """A state the host could not compute (null in the record): a board that computes one differs."""
    p["steps"][0]["output"]["norm"] = None


def _host_value_none(steps, p):
    """Issue 45, item 2: a host value that is not finite is a difference, whatever the board has."""
    p["steps"][0]["output"]["values"][2] = None
    steps[0]["output"]["values"][2] = 123.0


def _host_logit_none(steps, p):
    p["steps"][2]["top"][1][1] = None


def _board_logit_nan(steps, p):
    steps[5]["top"][0][1] = None  # printed as nan


def _both_none(steps, p):
    """Non-finite on both sides (a broken block scale both computed): still a difference."""
    p["steps"][1]["layers"][0]["norm"] = None
    steps[1]["layers"][0]["norm"] = None


CASES = [
    ("own", None, None),
    ("norm", _norm, (0, "layer 1")),
    ("norm within", _norm_within, None),
    ("value", _value, (2, "output")),
    ("value within", _value_within, None),
    ("nan", _embd_nan, (4, "embd")),
    ("near-tie", _near_tie, None),
    ("near-tie then a layer", _near_tie_then_a_layer, (5, "layer 0")),
    ("clear margin", _clear_margin, (1, "token")),
    ("fewer steps", _fewer_steps, (5, "token")),
    ("logit", _logit, (6, "logits")),
    ("top id", _top_id, (0, "logits")),
    ("tied top ids", _top_ids_tied, None),
    ("layer missing", _layer_missing, (1, "layer")),
    ("host none", _host_none, (0, "output")),
    ("host value none", _host_value_none, (0, "output")),
    ("host logit none", _host_logit_none, (2, "logits")),
    ("board logit nan", _board_logit_nan, (5, "logits")),
    ("both none", _both_none, (1, "layer 0")),
]


def c_compare(q25tok: Path, tmp_path, want: dict, board: str) -> subprocess.CompletedProcess:
    """`q25tok compare EXPECTED 3 DUMP` on ``board`` against ``want`` rendered as `package`
    renders it (the prompt as number 3 of 4)."""
    other = {**want, "steps": want["steps"][:1]}
    exp = tmp_path / "q25-forward.txt"
    exp.write_bytes(forward_expect.render({"prompts": [other, other, other, want]}))
    dump = tmp_path / "dump.txt"
    dump.write_text(board)
    return run_c(q25tok, exp, 3, dump)


def run_c(q25tok: Path, exp, n, dump) -> subprocess.CompletedProcess:
    return subprocess.run([q25tok, "compare", exp, str(n), dump], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_q25tok_compare_and_record_compare_agree(tmp_path, q25tok_bin, prompt, case):
    _, change, expected = case
    want, steps = copy.deepcopy(prompt), copy.deepcopy(prompt["steps"])
    if change:
        change(steps, want)
    board = c_style(steps)
    host = first_difference(want, parse_dump(board))
    assert (None if host is None else (host.step, host.where)) == expected, host
    r = c_compare(q25tok_bin, tmp_path, want, board)
    assert r.stderr == ""
    if expected is None:
        assert r.returncode == 0, r.stdout
        assert r.stdout.startswith("near-tie at step 3:") if case[0] == "near-tie" else r.stdout == ""
    else:  # the very line record_compare writes
        assert (r.returncode, r.stdout) == (11, f"{host}\n")


def test_q25tok_compare_reports_a_near_tie_as_record_compare_names_it(tmp_path, q25tok_bin, prompt):
    want, steps = copy.deepcopy(prompt), copy.deepcopy(prompt["steps"])
    _near_tie(steps, want)
    r = c_compare(q25tok_bin, tmp_path, want, c_style(steps))
    t = want["steps"][3]["top"]
    assert r.returncode == 0
    assert r.stdout == f"near-tie at step 3: token {t[1][0]}, host {t[0][0]} (margin 0.0005)\n"
    assert r.stdout == near_tie(want, parse_dump(c_style(steps))) + "\n"


def test_q25tok_compare_agrees_with_every_prompt_of_the_record(tmp_path, q25tok_bin, ota_builds):
    """Each prompt of the tiny model's real record, as the payload renders it and as generate prints it."""
    record = json.loads((ota_builds["A"] / "forward_record.json").read_text())
    exp = tmp_path / "q25-forward.txt"
    exp.write_bytes(forward_expect.render(record))
    for n, p in enumerate(record["prompts"]):
        for board in (c_style(p["steps"]), "\n".join(forward_expect.dump_lines(p)) + "\n"):
            assert first_difference(p, parse_dump(board)) is None
            (tmp_path / "dump.txt").write_text(board)
            r = run_c(q25tok_bin, exp, n, tmp_path / "dump.txt")
            assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "line",
    ["garbage", "layer 5 norm 1 values 1 2 3 4", "embd norm x values 1 2 3 4", "top 1 2 3", "step 0 pos 1 token 2"],
)
def test_q25tok_compare_refuses_unreadable_output_as_parse_dump_does(tmp_path, q25tok_bin, prompt, line):
    board = c_style(prompt["steps"]).replace("\noutput ", f"\n{line}\noutput ", 1)
    with pytest.raises(ValueError):
        parse_dump(board)
    r = c_compare(q25tok_bin, tmp_path, prompt, board)
    assert r.returncode == 3 and r.stdout == ""
    assert (
        r.stderr.startswith(f"q25tok: compare: {tmp_path / 'dump.txt'}: q25tok generate's line ") and line in r.stderr
    )


def forward_file(prompt: dict) -> str:
    return forward_expect.render({"prompts": [prompt]}).decode()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda t: t.replace("q25-forward 3", "q25-forward 1", 1), "first line is not 'q25-forward 3'"),
        (
            lambda t: "\n".join(x for x in t.split("\n") if not x.startswith("tolerances ")),
            "before the tolerances line",
        ),
        (lambda t: t.replace("state_rtol 0.02", "state_rtol nan", 1), "a bad tolerances line"),
        (lambda t: t.replace("state_rtol 0.02", "state_rtol 1e3", 1), "a bad tolerances line"),
        (lambda t: t.replace(" steps 8 ", " steps 7 ", 1), "has 8 steps for prompt 0, its prompt line says 7"),
        (lambda t: t.replace("\nembd ", "\nembd norm 1 values 0x1p3 1 2 3\nembd ", 1), "a bad number"),
        (lambda t: t.replace("\ntop ", "\ntop" + " 1 2" * 65 + "\ntop ", 1), "more top logits"),
        (lambda t: t + t.split("\n", 2)[2], "the prompt a second time"),
        (lambda t: t.replace("\nprompt 0 ", "\nprompt 1 ", 1), "no steps for prompt 0"),
        (lambda t: t.replace("\noutput ", "\noutputs ", 1), "an unexpected line"),
    ],
)
def test_q25tok_compare_refuses_a_malformed_forward_file(tmp_path, q25tok_bin, prompt, change, why):
    exp = tmp_path / "q25-forward.txt"
    exp.write_text(change(forward_file(prompt)))
    (tmp_path / "dump.txt").write_text(c_style(prompt["steps"]))
    r = run_c(q25tok_bin, exp, 0, tmp_path / "dump.txt")
    assert r.returncode == 3 and r.stdout == "" and r.stderr.startswith(f"q25tok: compare: {exp}: ")
    assert why in r.stderr and r.stderr.count("\n") == 1


def test_q25tok_compare_reads_no_link_and_checks_its_arguments(tmp_path, q25tok_bin, prompt):
    exp = tmp_path / "q25-forward.txt"
    exp.write_text(forward_file(prompt))
    (tmp_path / "dump.txt").write_text(c_style(prompt["steps"]))
    (tmp_path / "link.txt").symlink_to(tmp_path / "dump.txt")
    assert run_c(q25tok_bin, exp, 0, tmp_path / "link.txt").returncode == 1
    assert run_c(q25tok_bin, exp, 0, tmp_path / "missing.txt").returncode == 1
    for n in ("-1", "x", "", "1234567890"):
        assert run_c(q25tok_bin, exp, n, tmp_path / "dump.txt").returncode == 2
    assert run_c(q25tok_bin, exp, 0, tmp_path / "dump.txt").returncode == 0


def _random_change(rng: random.Random, steps: list[dict], p: dict) -> None:
    """One planted change near a tolerance's edge: a state's norm or value, a top logit or id,
    a token (at a margin the host's record may make a near-tie), a value not finite."""
    s = rng.randrange(len(steps))
    st = steps[s]
    state = rng.choice([st["embd"], st["output"], *st["layers"]])
    by = rng.choice([0.5, 0.9, 1.1, 2, 3]) * STATE_RTOL
    kind = rng.randrange(6)
    if kind == 0:
        state["norm"] *= 1 + rng.choice([-1, 1]) * by
    elif kind == 1:
        state["values"][rng.randrange(4)] += rng.choice([-1, 1]) * by * state["norm"]
    elif kind == 2:
        j = rng.randrange(len(st["top"]))
        i, v = st["top"][j]
        st["top"][j] = [i + rng.choice([0, 1]), v + rng.choice([-1, 1]) * rng.choice([0.5, 2]) * LOGIT_ATOL]
    elif kind == 3:
        p["steps"][s]["margin"] = rng.choice([0.5e-3, 2e-3, None])
        st["token"] = p["steps"][s]["top"][1][0]
    elif kind == 4:
        state["values"][rng.randrange(4)] = None
    else:
        p["steps"][s]["top"][rng.randrange(5)][1] = None


def test_q25tok_compare_and_record_compare_agree_on_random_changes(tmp_path, q25tok_bin, prompt):
    rng = random.Random(46)
    for _ in range(120):
        want, steps = copy.deepcopy(prompt), copy.deepcopy(prompt["steps"])
        for _ in range(rng.randrange(1, 3)):
            _random_change(rng, steps, want)
        board = c_style(steps)
        host = first_difference(want, parse_dump(board))
        r = c_compare(q25tok_bin, tmp_path, want, board)
        if host is None:
            tie = near_tie(want, parse_dump(board))
            assert (r.returncode, r.stdout) == (0, "" if tie is None else tie + "\n")
        else:
            assert (r.returncode, r.stdout) == (11, f"{host}\n")
