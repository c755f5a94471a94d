"""What deploy, smoke and status print without --json, against a real sshd (issue 45, items 5
and 8): each board's checks under its row, failures first, the columns of the command, and
the status table's header over its own values; --json keeps every check, ``q25tok info``'s
detail from its start."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from deploy_helpers import board_argv, deploy

from q25deploy.cli import main


def table(capsys, ssh, srv, root, build, action: str, *extra: str) -> tuple[int, list[str]]:
    argv = board_argv(action, ssh, srv, root, "--build", str(build), "--quiet", *extra)
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().out.splitlines()


def starts(line: str) -> list[int]:
    """Where each space-separated cell of ``line`` starts."""
    return [m.start() for m in re.finditer(r"\S+", line)]


def test_smoke_prints_its_checks_in_its_own_columns(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0, err

    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="smoke")
    assert code == 0
    checks = res[0]["smoke"]["checks"]
    image = root / "lib" / "firmware" / "q25" / "current" / "tokenizer.q25tokrt"
    info = " ".join(subprocess.run([q25tok, "info", image], capture_output=True, text=True).stdout.split())
    (detail,) = [c["detail"] for c in checks if c["name"] == "q25tok info"]
    assert info and detail.rstrip("…") == info[: len(detail.rstrip("…"))]  # its start, not its tail

    code, lines = table(capsys, ssh, srv, root, models["A"], "smoke")
    assert code == 0
    head, row = lines[0], lines[1]
    assert head.split() == ["host", "ok", "release", "smoke", "checks", "time", "detail"], lines
    assert row.split()[1:4] == ["yes", res[0]["release"], "pass"], lines
    assert f"{len(checks)} passed" in row and re.search(r" \d+\.\ds ", row + " "), lines
    body = lines[2:-1]
    ids = [c for c in checks if c["name"].startswith("encode prompt ")]
    assert f"  ok   ids  {len(ids)} of {len(ids)} prompts: the board's ids are the host's" in body, body
    assert f"  ok   q25tok info  {detail}" in body, body
    assert "  ok   partition sha256" in body, body
    warned = [ln for ln in body if ln.startswith("  warn ")]
    assert warned and any("predates" in w for w in warned), body  # no live device tree under the remote root
    assert lines[-1] == "1 of 1 host(s) ok"

    # --strict (deploy --help and smoke --help: every smoke-test warning fails the test): each
    # warning above is a failed check, not only the device tree's
    code, strict, _ = deploy(capsys, ssh, srv, root, models["A"], "--strict", action="smoke")
    failed = [c["name"] for c in strict[0]["smoke"]["checks"] if not c["ok"]]
    assert code == 13 and not strict[0]["smoke"]["warnings"], strict
    assert len(failed) == len(res[0]["smoke"]["warnings"]) == len(warned) and "residency" in failed, failed


def test_a_failed_check_comes_first_and_deploy_keeps_its_columns(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][1], tmp_path / "board"
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0, err
    b = tmp_path / "A"
    shutil.copytree(models["A"], b)
    record = json.loads((b / "smoke_ids.json").read_text())
    record["prompts"][3]["ids"][-1] += 1
    (b / "smoke_ids.json").write_text(json.dumps(record))

    code, lines = table(capsys, ssh, srv, root, b, "smoke")
    assert code == 13, lines
    assert "FAIL" in lines[1] and "1 failed" in lines[1], lines
    n = len(record["prompts"][3]["ids"])
    want = record["prompts"][3]["ids"][-1]
    # failures first, with where the ids differ
    assert lines[2] == f"  FAIL ids prompt 3  id {n - 1} of {n}: board [{want - 1}] ({n} ids), host [{want}]", lines
    assert not any("FAIL" in ln for ln in lines[3:-1]), lines

    code, lines = table(
        capsys, ssh, srv, root, models["A"], "deploy", "--allow-unreserved", "--runtime-bin", str(q25tok)
    )
    assert code == 0, lines
    assert lines[0].split() == ["host", "ok", "release", "sent", "files", "smoke", "time", "detail"], lines
    assert lines[1].split()[3:6] == ["0", "0", "pass"], lines  # nothing to send: the board has it
    assert any(ln.startswith("  ok   ids  ") for ln in lines[2:]), lines


def test_the_status_header_sits_over_its_values(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][2], tmp_path / "board"
    code, _, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0, err
    code, lines = table(capsys, ssh, srv, root, models["A"], "status")
    assert code == 0, lines
    head, row = lines[0], lines[1]
    assert head.split() == ["host", "ok", "current", "previous", "reserved", "residency", "detail"], lines
    assert starts(row)[:6] == starts(head)[:6], lines  # each value under its own header
    assert row.split()[5] in ("resident", "not-reserved", "unsupported", "failed"), lines
    assert "forward pass passed (1 prompt)" in row, lines  # the deploy's, from the board's state: not run again
