"""The OTA payload's forward expectations (q25deploy/model/forward_expect.py) and the plan's
forward line (q25deploy/ota/plan.py), on the tiny model's real forward record."""

from __future__ import annotations

import json
import shutil

import pytest

from q25deploy.model import forward_expect
from q25deploy.model.record_compare import LOGIT_ATOL, STATE_RTOL, TOKEN_MARGIN, first_difference, parse_dump
from q25deploy.ota.plan import plan_package
from q25deploy.tokenizer.prompts import SMOKE_PROMPTS

IDS = [[1]] * len(SMOKE_PROMPTS)


def record_of(build) -> dict:
    return json.loads((build / "forward_record.json").read_text())


def sections(text: str) -> dict[int, tuple[str, str]]:
    """prompt number -> (its prompt line, its dump lines) of a q25-forward.txt."""
    out: dict[int, tuple[str, str]] = {}
    head, *rest = text.split("\nprompt ")
    assert head == f"{forward_expect.HEADER}\n{forward_expect.TOLERANCES}"
    for chunk in rest:
        line, _, body = chunk.partition("\n")
        out[int(line.split()[0])] = ("prompt " + line, body)
    return out


def test_the_rendered_lines_read_back_as_the_record(ota_builds):
    """parse_dump (the host's reading of `q25tok generate --dump-layers`) of the rendered lines
    is the record's steps, every float the same double; so they agree with the record."""
    record = record_of(ota_builds["A"])
    text = forward_expect.render(record).decode("ascii")
    got = sections(text)
    assert sorted(got) == list(range(len(record["prompts"]))) == list(range(len(SMOKE_PROMPTS)))
    for i, p in enumerate(record["prompts"]):
        line, body = got[i]
        fed = p["ids"] + p["forced"]  # the prompt, then its forced continuation: what generate is fed
        assert line == f"prompt {i} steps {len(p['steps'])} ids {','.join(map(str, fed))}"
        steps = parse_dump(body)
        assert steps == p["steps"]
        assert first_difference(p, steps) is None
    assert text.endswith("\n") and "\n\n" not in text


def test_the_tolerances_line_holds_record_compares_constants():
    """Written once, on the host: the board's comparison reads them from the file."""
    words = forward_expect.TOLERANCES.split()
    assert words[0] == "tolerances" and words[1::2] == ["state_rtol", "logit_atol", "token_margin"]
    assert [float(w) for w in words[2::2]] == [STATE_RTOL, LOGIT_ATOL, TOKEN_MARGIN]


def test_a_null_in_the_record_is_written_as_nan():
    """The record holds non-finite floats as null (docs/forward.md); the board's lines print them
    as C does (nan), and the comparison skips what the host could not compute."""
    state = {"norm": 1.5, "values": [0.25, None, -1.0, 3.0]}
    step = {"position": 3, "token": 7, "top": [[7, 2.0], [1, None]], "margin": None}
    lines = forward_expect.dump_lines({"steps": [{**step, "embd": state, "layers": [state], "output": state}]})
    assert lines == [
        "step 0 pos 3 token 7 margin nan",
        "top 7 2.0 1 nan",
        "embd norm 1.5 values 0.25 nan -1.0 3.0",
        "layer 0 norm 1.5 values 0.25 nan -1.0 3.0",
        "output norm 1.5 values 0.25 nan -1.0 3.0",
    ]


def plan_lines(build, **kw) -> tuple[list[str], dict]:
    plan = plan_package(
        build, target="qemu", install_dir="/lib/firmware/q25", q25tok="/usr/bin/q25tok", smoke_ids=IDS, **kw
    )
    return plan.files[0].data.decode().splitlines(), {f.name: f for f in plan.files}


def test_a_full_plan_carries_the_forward_file_and_a_tokenizer_only_plan_does_not(ota_builds):
    lines, files = plan_lines(ota_builds["A"])
    assert [ln for ln in lines if ln.startswith("forward ")] == ["forward q25-forward.txt"]
    f, record = files["q25-forward.txt"], record_of(ota_builds["A"])
    first = {**record, "prompts": record["prompts"][:1]}  # by default, the first prompt (package --forward)
    assert f.data == forward_expect.render(first) and f.rel == "" and f.size == len(f.data)
    _, files = plan_lines(ota_builds["A"], forward_prompts=None)
    assert files["q25-forward.txt"].data == forward_expect.render(record)
    lines, files = plan_lines(ota_builds["A"], forward_prompts=0)
    assert "q25-forward.txt" not in files and not [ln for ln in lines if ln.startswith("forward")]
    lines, files = plan_lines(ota_builds["A2"], tokenizer_only=True)
    assert not [ln for ln in lines if ln.startswith("forward")] and "q25-forward.txt" not in files


def test_more_prompts_than_the_build_recorded_fail_the_package_naming_the_fix(ota_builds):
    from q25deploy.errors import PackageError

    n = len(record_of(ota_builds["A"])["prompts"])
    with pytest.raises(PackageError, match=f"recorded the forward pass on {n} smoke prompt.*--forward {n + 1} "):
        plan_lines(ota_builds["A"], forward_prompts=n + 1)


def with_record(src, dst, change):
    """A copy of the build ``src`` whose forward_record.json ``change`` edited (in place; the
    manifest's digest follows, as a build by a q25deploy that wrote it so would have it)."""
    import hashlib

    shutil.copytree(src, dst)
    rec = record_of(dst)
    change(rec)
    data = json.dumps(rec).encode()
    (dst / "forward_record.json").write_bytes(data)
    manifest = json.loads((dst / "manifest.json").read_text())
    for a in manifest["artifacts"]:
        if a["path"] == "forward_record.json":
            a.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_no_forward_file_with_a_record_of_another_model(tmp_path, ota_builds):
    """A record of another model than the release's describes other weights: the plan says
    nothing of the forward pass (the board skips it, as for a build without a record)."""
    build = with_record(ota_builds["A"], tmp_path / "A", lambda r: r.update(model_sha256="0" * 64))
    lines, files = plan_lines(build)
    assert "q25-forward.txt" not in files and not [ln for ln in lines if ln.startswith("forward")]


@pytest.mark.parametrize("bad", ["prompts", "steps"])
def test_a_damaged_record_fails_the_package(tmp_path, ota_builds, bad):
    from q25deploy.errors import PackageError

    build = with_record(ota_builds["A"], tmp_path / "A", lambda r: r.update({bad: "x"}))
    with pytest.raises(PackageError, match="forward_record.json"):
        plan_lines(build)
