"""The forward check's verdicts on what a board prints (q25deploy/deploy/ops/forward_check.py),
with a board that answers from a script: agreement, a near tie taken the other way (named,
compared past), a q25tok without generate --positions, a failing and a garbled generate. The real
runs: test_smoke_forward.py (sshd) and emulated/test_board_forward.py."""

from __future__ import annotations

import copy
import json

import pytest
from forward_dump import dump

from q25deploy import layout
from q25deploy.deploy.ops.forward_check import MARK, check_forward, generate_script
from q25deploy.deploy.ops.smoke import _Report

PATHS = {"memory": "/dev/mem", "device_tree": "/proc/device-tree"}


class ScriptedSession:
    """Answers every command with one (status, stdout, stderr) and keeps the commands."""

    def __init__(self, status: int, out: str, err: str = "") -> None:
        self.answer = (status, out.encode(), err.encode())
        self.commands: list[list[str]] = []

    def run(self, argv, *, check=True, timeout=0):
        self.commands.append(list(argv))
        return self.answer


@pytest.fixture(scope="module")
def record(builds) -> dict:
    return json.loads((builds["kv260"] / layout.FORWARD_RECORD).read_text())


def printed(steps_per_prompt: list[list[dict]]) -> str:
    return "".join(dump(steps) + MARK + "\n" for steps in steps_per_prompt)


def run(record: dict, board: ScriptedSession, strict=False, state="resident") -> _Report:
    report = _Report(strict)
    check_forward(board, report, "/opt/q25/current", "/usr/bin/q25tok", record, {"state": state}, PATHS)  # type: ignore[arg-type]
    return report


def test_the_command_and_an_agreeing_board(record):
    board = ScriptedSession(0, printed([p["steps"] for p in record["prompts"]]))
    report = run(record, board)
    assert all(c["ok"] for c in report.checks) and len(report.checks) == len(record["prompts"])
    assert not report.warnings
    assert board.commands == [["sh", "-c", board.commands[0][2]]]
    script = board.commands[0][2]
    ids = record["prompts"][0]["ids"]
    assert script == generate_script(
        "/usr/bin/q25tok",
        ["--mem", "/dev/mem", "--dt", "/proc/device-tree"],
        ["/opt/q25/current/partitions/regions.tab", "/opt/q25/current/partitions/tensors.tab"],
        record["steps"],
        [p["ids"] + p["forced"] for p in record["prompts"]],
    )
    fed = ids + record["prompts"][0]["forced"]
    assert f" --positions {record['steps']} " in script.splitlines()[0] and "--steps" not in script
    assert script.splitlines()[0].endswith(" ".join(map(str, fed)) + f" || exit $?; echo {MARK}")
    files = ScriptedSession(0, printed([p["steps"] for p in record["prompts"]]))
    report = run(record, files, state="not-reserved")
    assert " --files " in files.commands[0][2] and "--mem" not in files.commands[0][2]
    assert report.warnings == ["forward pass run from the partition files: they are not in reserved memory"]


def test_a_near_tie_taken_the_other_way_is_named_and_compared_past(record):
    rec = copy.deepcopy(record)
    steps = [copy.deepcopy(p["steps"]) for p in rec["prompts"]]
    steps[1][3]["token"] = steps[1][3]["top"][1][0]
    rec["prompts"][1]["steps"][3]["margin"] = 1e-5
    for strict in (False, True):  # the inputs are forced: a near tie weakens nothing, warns of nothing
        report = run(rec, ScriptedSession(0, printed(steps)), strict=strict)
        assert all(c["ok"] for c in report.checks) and not report.warnings
        assert f"(near-tie at step 3: token {steps[1][3]['token']}, host " in report.checks[1]["detail"]
    steps[1][6]["output"]["norm"] *= 1.01  # past the near tie, still compared
    report = run(rec, ScriptedSession(0, printed(steps)))
    bad = [c for c in report.checks if not c["ok"]]
    assert len(bad) == 1 and bad[0]["detail"].startswith("step 6: output: norm ")
    steps[1][6]["output"]["norm"] /= 1.01
    rec["prompts"][1]["steps"][3]["margin"] = 0.5  # a clear margin: the board's token is wrong
    report = run(rec, ScriptedSession(0, printed(steps)))
    bad = [c for c in report.checks if not c["ok"]]
    assert len(bad) == 1 and bad[0]["detail"].startswith("step 3: token: ")


def test_a_layer_differs_and_is_named_with_its_tensors(record):
    steps = [copy.deepcopy(p["steps"]) for p in record["prompts"]]
    steps[2][0]["layers"][1]["norm"] *= 1.01
    report = run(record, ScriptedSession(0, printed(steps)))
    bad = [c for c in report.checks if not c["ok"]]
    assert [c["name"] for c in bad] == ["forward prompt 2"]
    assert bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): norm ")


def test_q25tok_without_generate_a_failure_and_garbage(record):
    old = ScriptedSession(2, "", "usage: q25tok info|encode|decode|load|verify IMAGE ...\n")
    report = run(record, old)
    assert not report.checks and report.warnings[0].startswith(
        "forward pass not run: this q25tok has no generate --positions"
    )
    assert not run(record, old, strict=True).result()["ok"]
    first = printed([record["prompts"][0]["steps"]])
    report = run(record, ScriptedSession(6, first + "step 0 pos", "q25tok: region 0 not reserved\n"))
    assert [c["ok"] for c in report.checks] == [True, False]
    assert report.checks[1]["detail"] == "q25tok generate failed (exit 6): q25tok: region 0 not reserved"
    report = run(record, ScriptedSession(0, f"layer 0 norm x\n{MARK}\n"))
    assert not report.checks[0]["ok"] and report.checks[0]["detail"].startswith("q25tok generate printed ")


def test_non_finite_on_either_side_is_a_named_difference_never_a_crash(record):
    """Issue 45, item 2: a host record with nulls (a non-finite reference) and a board that
    prints nan are each a failed check naming the layer; a record the comparison cannot read
    is that board's failure in one line."""
    host = copy.deepcopy(record)
    for st in host["prompts"][0]["steps"]:
        for x in st["layers"][1:] + [st["output"]]:
            x["norm"], x["values"] = None, [None] * len(x["values"])
        st["top"] = [[i, None] for i, _ in st["top"]]
        st["margin"] = None
    board = ScriptedSession(0, printed([p["steps"] for p in record["prompts"]]))
    report = run(host, board)
    bad = [c for c in report.checks if not c["ok"]]
    assert [c["name"] for c in bad] == ["forward prompt 0"], report.checks
    assert bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): the host reference is not finite here"), bad

    steps = copy.deepcopy(record["prompts"][0]["steps"])
    steps[0]["layers"][1]["values"][3] = float("nan")
    report = run({**record, "prompts": record["prompts"][:1]}, ScriptedSession(0, printed([steps])))
    assert report.checks[0]["detail"].startswith("step 0: layer 1 (blk.1.*): value #3 nan (not finite)"), report.checks

    broken = copy.deepcopy(record)
    del broken["prompts"][0]["steps"][0]["embd"]
    report = run(broken, ScriptedSession(0, printed([p["steps"] for p in record["prompts"]])))
    assert report.checks[0] == {
        "name": "forward prompt 0",
        "ok": False,
        "detail": "cannot compare with the build's forward record: KeyError: 'embd'",
    }
