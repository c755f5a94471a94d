"""smoke's forward pass over a real sshd (q25deploy/deploy/ops/forward_check.py): the board's
`q25tok generate` (here the host build, on the stand-in /dev/mem of test_deploy_reserved.py)
from the reserved regions agrees with the build's forward record under `deploy --strict`; one
flipped byte in the scale of a block in the middle of a layer-1 tensor (which the tensor probe,
reading first and last blocks, does not see) fails `smoke` and names layer 1; without the
reservation the pass runs from the partition files, a warning (a failure with --strict). On
the emulated board: tests/deploy/emulated/test_board_forward.py."""

from __future__ import annotations

import json
import os

from deploy_helpers import INSTALL, deploy
from quant_blocks import SCALE_HIGH_BYTE, flipped, middle_scale, with_scale
from release_builds import shared_a2_build
from stuck_memory import stuck_q25tok
from test_deploy_reserved import reserved_board, resident

from q25deploy.builddir import BuildDir
from q25deploy.cli.app import main


def forward_checks(res) -> list[dict]:
    return [c for c in res[0]["smoke"]["checks"] if c["name"].startswith("forward")]


def scale_byte(pmap: dict, layer: int) -> tuple[str, int]:
    """(tensor name, address in memory of the high byte of a middle block's scale) of a
    quantised tensor of ``layer``."""
    t = next(t for t in pmap["tensors"] if t["name"].startswith(f"blk.{layer}.") and t["type"] in SCALE_HIGH_BYTE)
    return t["name"], pmap["regions"][t["region"]]["base"] + t["offset"] + middle_scale(t)


def test_smoke_runs_the_forward_pass_from_the_regions(tmp_path, capsys, ssh, models, q25tok):
    srv, root, build = ssh["servers"][2], tmp_path / "board", models["A"]
    here, dt, mem = reserved_board(tmp_path, build)
    b = BuildDir(build)
    record = b.forward_record
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, runtime=q25tok, unreserved=False)
    assert code == 0 and res[0]["smoke"]["ok"] and not res[0]["smoke"]["warnings"], res
    assert [c["name"] for c in forward_checks(res)] == ["forward prompt 0"]  # by default, one prompt
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--forward", "0", *here, action="smoke")
    assert code == 0 and forward_checks(res) == [], res
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", "--forward", "all", *here, action="smoke")
    assert code == 0 and res[0]["smoke"]["ok"] and not res[0]["smoke"]["warnings"], res
    checks = forward_checks(res)
    assert [c["name"] for c in checks] == [f"forward prompt {i}" for i in range(len(record["prompts"]))]
    for c, p in zip(checks, record["prompts"]):
        ids = [s["token"] for s in p["steps"]]
        tokens = " ".join(map(str, ids))
        assert c == {
            "name": c["name"],
            "ok": True,
            "detail": f"{record['steps']} positions as the host from the reserved regions: tokens {tokens}",
            "tokens": ids,
            "expected": ids,
        }

    name, at = scale_byte(b.partition_map, 1)
    with open(mem, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([flipped(byte)]))
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--forward", "all", *here, action="smoke")
    assert code == 13, res
    checks = {c["name"]: c for c in res[0]["smoke"]["checks"]}
    assert checks["tensor probe"]["ok"], checks  # a middle block: only the forward pass sees it
    bad = [c for c in forward_checks(res) if not c["ok"]]
    assert bad and bad[0]["name"] == "forward prompt 0", res
    assert bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): "), (name, bad)

    with open(mem, "r+b") as f:  # put it back: the reservation goes, the pass runs from the files
        f.seek(at)
        f.write(bytes([byte]))
    for node in (dt / "reserved-memory").iterdir():
        for f in node.iterdir():
            f.unlink()
        node.rmdir()
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--forward", "3", *here, action="smoke")
    warning = "forward pass run from the partition files: they are not in reserved memory"
    assert warning in res[0]["smoke"]["warnings"]
    assert len(forward_checks(res)) == 3, res
    assert all(c["ok"] and "from the partition files" in c["detail"] for c in forward_checks(res)), res
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, action="smoke")
    assert code == 13 and {"name": "forward pass", "ok": False, "detail": warning} in res[0]["smoke"]["checks"]


def board_state(root) -> dict:
    return json.loads((root / "lib" / "firmware" / "q25" / ".q25deploy-state.json").read_text())


def test_a_deploy_of_weights_that_passed_does_not_run_the_pass_again(tmp_path, capsys, ssh, models, q25tok):
    """The pass a release passed is in the board's state; a redeploy with the same weights,
    q25tok and record says so instead of running it; another record (more prompts) runs it;
    ``smoke`` always does."""
    srv, root, build = ssh["servers"][2], tmp_path / "board", models["A"]
    here, _, _ = reserved_board(tmp_path, build)
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, runtime=q25tok, unreserved=False)
    assert code == 0 and [c["name"] for c in forward_checks(res)] == ["forward prompt 0"], res
    release = res[0]["release"]
    state = board_state(root)
    fw = state["releases"][release]["forward"]
    assert fw["prompts"] == 1 and len(fw["key"]) == 64 and "release" not in fw, fw
    assert res[0]["smoke"]["forward"] == fw
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, runtime=q25tok, unreserved=False)
    assert code == 0 and [c["name"] for c in forward_checks(res)] == ["forward pass"], res
    assert forward_checks(res)[0]["detail"].startswith(
        f"not run: these weights, this q25tok and this record passed it at release {release} (1 prompt;"
    ), res
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--forward", "2", *here, runtime=q25tok, unreserved=False)
    assert code == 0 and [c["name"] for c in forward_checks(res)] == ["forward prompt 0", "forward prompt 1"], res
    assert board_state(root)["releases"][release]["forward"]["prompts"] == 2
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, action="smoke")
    assert code == 0 and [c["name"] for c in forward_checks(res)] == ["forward prompt 0"], res


def test_a_tokenizer_only_update_of_resident_weights_does_not_run_the_pass(
    tmp_path, tmp_path_factory, capsys, ssh, models, q25tok
):
    """A new tokenizer image over weights that passed, resident in regions that ``q25tok
    verify`` proves unchanged: the pass is not run again; on an unreserved board it is
    (tests/deploy/ops/test_deploy.py::test_tokenizer_only_update)."""
    srv, root, build = ssh["servers"][2], tmp_path / "board", models["A"]
    here, _, _ = reserved_board(tmp_path, build)
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, runtime=q25tok, unreserved=False)
    assert code == 0 and [c["name"] for c in forward_checks(res)] == ["forward prompt 0"], res
    first = res[0]["release"]
    code, res, _ = deploy(
        capsys,
        ssh,
        srv,
        root,
        shared_a2_build(tmp_path_factory),
        "--tokenizer-only",
        *here,
        runtime=q25tok,
        unreserved=False,
    )
    assert code == 0 and res[0]["ok"], res
    forward = forward_checks(res)
    assert [c["name"] for c in forward] == ["forward pass"] and f"at release {first}" in forward[0]["detail"], res
    assert res[0]["smoke"]["forward"]["release"] == first


def test_another_models_build_runs_no_forward_pass(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][2], tmp_path / "board"
    here, _, _ = reserved_board(tmp_path, models["A"])
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], *here, runtime=q25tok, unreserved=False)
    assert code == 0, res
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], "--strict", *here, action="smoke")
    assert forward_checks(res) == [], res  # B's record is not of the weights the board holds


def test_a_non_finite_reference_is_a_named_difference_not_exit_70(tmp_path, capsys, ssh, models, q25tok):
    """Issue 45, item 2: a build whose host reference goes non-finite (an inf block scale in
    layer 1: a valid GGUF) deploys and smokes to a named difference, the board's one failure
    (exit 13), never ``internal error: TypeError`` and exit 70."""
    srv, root = ssh["servers"][2], tmp_path / "board"
    gguf, build = tmp_path / "inf.gguf", tmp_path / "build"
    with_scale(models["A"].parent / "A.gguf", gguf, "blk.1.attn_q.weight")
    assert main(["build", "--target", "qemu", "--model", str(gguf), "--out", str(build), "--quiet"]) == 0
    here, _, _ = reserved_board(tmp_path, build)
    code, res, err = deploy(capsys, ssh, srv, root, build, *here, runtime=q25tok, unreserved=False)
    assert code == 13 and "internal error" not in err, (err, res)
    bad = [c for c in forward_checks(res) if not c["ok"]]
    assert bad and bad[0]["name"] == "forward prompt 0", res
    assert bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): the host reference is not finite here"), bad
    code, res, err = deploy(capsys, ssh, srv, root, build, "--forward", "0", *here, runtime=q25tok, unreserved=False)
    assert code == 0, (err, res)  # without the forward pass: deployed
    code, res, err = deploy(capsys, ssh, srv, root, build, "--forward", "all", *here, action="smoke")
    assert code == 13 and "internal error" not in err, (err, res)
    bad = [c for c in forward_checks(res) if not c["ok"]]
    assert bad and all("the host reference is not finite here" in c["detail"] for c in bad), res


def test_a_deploy_runs_the_pass_beside_its_load_and_it_stands_for_the_regions(tmp_path, capsys, ssh, models, q25tok):
    """A deploy that has just sent every partition loads them (each MiB compared as it is read
    back) while the forward pass runs from those files, in one board command: once the load has
    read every region back as written, the pass stands for the regions (its check says so; the
    residency and the load record are the load's). Regions that do not keep what was written
    (a stuck address line under a layer-1 tensor, tests/stuck_memory.py) fail the residency,
    and the pass runs again from the regions and names layer 1."""
    srv, root, build = ssh["servers"][2], tmp_path / "board", models["A"]
    here, _, mem = reserved_board(tmp_path, build)
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, runtime=q25tok, unreserved=False)
    assert code == 0 and res[0]["smoke"]["ok"] and not res[0]["smoke"]["warnings"], res
    assert res[0]["residency"]["state"] == "resident", res
    assert all("sha256" not in r and r["state"] == "loaded" for r in res[0]["residency"]["regions"]), res
    [check] = forward_checks(res)
    where = "from the partition files, which the reserved regions hold (loaded beside it, each read back)"
    assert check["ok"] and where in check["detail"], check
    assert (root / INSTALL / ".q25deploy-loaded").is_file() and resident(mem, build)
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, action="status")
    assert res[0]["residency"] == "resident" and res[0]["residency_by"] == "load record", res

    pmap = BuildDir(build).partition_map
    _, at = scale_byte(pmap, 1)
    region = next(r for r in pmap["regions"] if r["base"] <= at < r["base"] + r["size"])
    stuck = stuck_q25tok(tmp_path, q25tok, (at - region["base"]) // os.sysconf("SC_PAGESIZE"))
    again = tmp_path / "board2"  # a first deploy again (the regions still hold A)
    code, res, _ = deploy(capsys, ssh, srv, again, build, *here, runtime=stuck, unreserved=False)
    assert code == 13 and res[0]["residency"]["state"] == "failed", res
    assert [r["state"] for r in res[0]["residency"]["regions"]] == ["MISMATCH"], res
    bad = [c for c in forward_checks(res) if not c["ok"]]
    assert bad and bad[0]["detail"].startswith("step 0: layer 1 (blk.1.*): "), res
