"""The forward check's verdicts on what a board prints (q25deploy/deploy/ops/forward_check.py):
the command runs here under sh, with the real q25tok's compare and a generate that prints the
test's dumps: agreement, a near tie taken the other way (named, compared past), a layer that
differs, a q25tok without generate --positions, a failing and a garbled generate, non-finite
values. The real runs: test_smoke_forward.py (sshd) and emulated/test_board_forward.py."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from forward_dump import dump

from q25deploy import layout
from q25deploy.deploy.ops.forward_check import MARK, check_forward, generate_script
from q25deploy.deploy.ops.smoke import _Report
from q25deploy.model.record_compare import STATE_RTOL

PATHS = {"memory": "/dev/mem", "device_tree": "/proc/device-tree"}
FAKE = """#!/bin/sh
# q25tok whose generate prints the next of the test's answers; compare is the real one
if [ "$1" = compare ]; then shift; exec {real} compare "$@"; fi
n=$(cat {d}/count); echo $((n + 1)) > {d}/count
[ -f {d}/$n.out ] || {{ echo "no answer $n" >&2; exit 99; }}
cat {d}/$n.out; cat {d}/$n.err >&2; exit $(cat {d}/$n.rc)
"""


class LocalBoard:
    """Runs every command here (the board's sh), keeping the commands; ``answers``: what each
    ``q25tok generate`` prints, as (stdout, status, stderr)."""

    def __init__(self, where: Path, real: Path, answers: list[tuple[str, int, str]]) -> None:
        where.mkdir(parents=True, exist_ok=True)
        (where / "count").write_text("0")
        for n, (out, rc, err) in enumerate(answers):
            (where / f"{n}.out").write_text(out)
            (where / f"{n}.err").write_text(err)
            (where / f"{n}.rc").write_text(str(rc))
        self.q25tok = where / "q25tok"
        self.q25tok.write_text(FAKE.format(real=real, d=where))
        self.q25tok.chmod(0o755)
        self.commands: list[list[str]] = []

    def run(self, argv, *, stdin=b"", check=True, timeout=0):
        self.commands.append(list(argv))
        r = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout or None)
        return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def record(builds) -> dict:
    return json.loads((builds["kv260"] / layout.FORWARD_RECORD).read_text())


@pytest.fixture
def board(tmp_path, q25tok):
    """``board(answers)``: a LocalBoard of its own; ``board(steps_per_prompt)``: each prompt's
    dump, status 0."""
    made = iter(range(1000))

    def make(answers) -> LocalBoard:
        answers = [a if isinstance(a, tuple) else (dump(a), 0, "") for a in answers]
        return LocalBoard(tmp_path / f"board{next(made)}", q25tok, answers)

    return make


def run(record: dict, board: LocalBoard, strict=False, state="resident") -> _Report:
    report = _Report(strict)
    check_forward(board, report, "/opt/q25/current", str(board.q25tok), record, {"state": state}, PATHS)  # type: ignore[arg-type]
    return report


def test_the_command_and_an_agreeing_board(record, board):
    agree = board([p["steps"] for p in record["prompts"]])
    report = run(record, agree)
    assert all(c["ok"] for c in report.checks) and len(report.checks) == len(record["prompts"]), report.checks
    assert not report.warnings
    assert agree.commands == [["sh", "-c", agree.commands[0][2]]]  # one board command
    script = agree.commands[0][2]
    assert script == generate_script(
        str(agree.q25tok),
        ["--mem", "/dev/mem", "--dt", "/proc/device-tree"],
        ["/opt/q25/current/partitions/regions.tab", "/opt/q25/current/partitions/tensors.tab"],
        record["steps"],
        [p["ids"] + p["forced"] for p in record["prompts"]],
    )
    fed = record["prompts"][0]["ids"] + record["prompts"][0]["forced"]
    first = next(ln for ln in script.splitlines() if " generate " in ln)
    assert f" --positions {record['steps']} " in first and "--steps" not in script
    assert f" {' '.join(map(str, fed))} > " in first and first.endswith(f"echo {MARK}")
    assert script.count(" compare ") == len(record["prompts"])  # the board's comparison, per prompt
    files = board([p["steps"] for p in record["prompts"]])
    report = run(record, files, state="not-reserved")
    assert " --files " in files.commands[0][2] and "--mem" not in files.commands[0][2]
    assert report.warnings == ["forward pass run from the partition files: they are not in reserved memory"]
    assert all(c["ok"] for c in report.checks)


def test_a_near_tie_taken_the_other_way_is_named_and_compared_past(record, board):
    rec = copy.deepcopy(record)
    steps = [copy.deepcopy(p["steps"]) for p in rec["prompts"]]
    steps[1][3]["token"] = steps[1][3]["top"][1][0]
    rec["prompts"][1]["steps"][3]["margin"] = 1e-5
    for strict in (False, True):  # the inputs are forced: a near tie weakens nothing, warns of nothing
        report = run(rec, board(steps), strict=strict)
        assert all(c["ok"] for c in report.checks) and not report.warnings, report.checks
        assert f"(near-tie at step 3: token {steps[1][3]['token']}, host " in report.checks[1]["detail"]
    steps[1][6]["output"]["norm"] *= 1 + 3 * STATE_RTOL  # past the near tie, still compared
    report = run(rec, board(steps))
    bad = [c for c in report.checks if not c["ok"]]
    assert len(bad) == 1 and bad[0]["detail"].startswith("step 6: output: norm "), bad
    steps[1][6]["output"]["norm"] /= 1 + 3 * STATE_RTOL
    rec["prompts"][1]["steps"][3]["margin"] = 0.5  # a clear margin: the board's token is wrong
    report = run(rec, board(steps))
    bad = [c for c in report.checks if not c["ok"]]
    assert len(bad) == 1 and bad[0]["detail"].startswith("step 3: token: "), bad
    assert (
        bad[0]["tokens"][3] == steps[1][3]["token"] and bad[0]["expected"][3] == rec["prompts"][1]["steps"][3]["token"]
    )


def test_a_layer_differs_and_is_named_with_its_tensors(record, board):
    steps = [copy.deepcopy(p["steps"]) for p in record["prompts"]]
    steps[2][0]["layers"][1]["norm"] *= 1 + 3 * STATE_RTOL
    report = run(record, board(steps))
    bad = [c for c in report.checks if not c["ok"]]
    assert [c["name"] for c in bad] == ["forward prompt 2"]
    assert bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): norm "), bad


def test_q25tok_without_generate_a_failure_and_garbage(record, board):
    old = [("", 2, "usage: q25tok info|encode|decode|load|verify IMAGE ...\n")]
    report = run(record, board(old))
    assert not report.checks and report.warnings[0].startswith(
        "forward pass not run: this q25tok has no generate --positions"
    )
    assert not run(record, board(old), strict=True).result()["ok"]
    first = dump(record["prompts"][0]["steps"])
    report = run(record, board([(first, 0, ""), ("step 0 pos", 6, "q25tok: region 0 not reserved\n")]))
    assert [c["ok"] for c in report.checks] == [True, False]
    assert report.checks[1]["detail"] == "q25tok generate failed (exit 6): q25tok: region 0 not reserved"
    report = run(record, board([("layer 0 norm x\n", 0, "")] * len(record["prompts"])))
    assert not report.checks[0]["ok"] and report.checks[0]["detail"].startswith("q25tok generate printed ")


def test_non_finite_on_either_side_is_a_named_difference_never_a_crash(record, board):
    """Issue 45, item 2: a host record with nulls (a non-finite reference) and a board that
    prints nan are each a failed check naming the layer; a record the comparison cannot read
    is that board's failure in one line."""
    host = copy.deepcopy(record)
    for st in host["prompts"][0]["steps"]:
        for x in st["layers"][1:] + [st["output"]]:
            x["norm"], x["values"] = None, [None] * len(x["values"])
        st["top"] = [[i, None] for i, _ in st["top"]]
        st["margin"] = None
    report = run(host, board([p["steps"] for p in record["prompts"]]))
    bad = [c for c in report.checks if not c["ok"]]
    assert [c["name"] for c in bad] == ["forward prompt 0"], report.checks
    assert bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): the host reference is not finite here"), bad

    steps = copy.deepcopy(record["prompts"][0]["steps"])
    steps[0]["layers"][1]["values"][3] = float("nan")
    report = run({**record, "prompts": record["prompts"][:1]}, board([steps]))
    assert report.checks[0]["detail"].startswith("step 0: layer 1 (blk.1.*): value #3 nan (not finite)"), report.checks

    broken = copy.deepcopy(record)
    del broken["prompts"][0]["steps"][0]["embd"]
    nothing = board([])
    report = run(broken, nothing)
    assert report.checks == [
        {
            "name": "forward pass",
            "ok": False,
            "detail": "cannot compare with the build's forward record: KeyError: 'embd'",
        }
    ]
    assert nothing.commands == []  # nothing run on the board
