"""The commit-time smoke test runs the model (q25-ota.sh under BusyBox sh, as in
test_ota_board.py, with q25tok built from our C sources on the tiny model): after `q25tok
verify`, `q25tok generate --files --dump-layers` on every smoke prompt is compared with the
build's forward record (the payload's q25-forward.txt); weights that differ from the host's
fail the commit and name the prompt, the step and the first layer that differs."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from ota_helpers import INSTALL, layout, make_board, mender_install, mender_tree, package, sh
from quant_blocks import flipped

from q25deploy.tokenizer.prompts import SMOKE_PROMPTS


@pytest.fixture(scope="module")
def arts(tmp_path_factory, ota_builds) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("forward-artifacts")
    return {
        "A": package(ota_builds["A"], "mender", d / "a.mender", "--forward", "all"),
        "B": package(ota_builds["B"], "mender", d / "b.mender"),  # the first prompt, by default
        "A2-tok": package(ota_builds["A2"], "mender", d / "a2-tok.mender", "--tokenizer-only"),
    }


def ok(runs) -> str:
    assert all(r.returncode == 0 for r in runs), [(r.args[2], r.stderr) for r in runs]
    return "".join(r.stderr for r in runs)


AGREES = f"q25-ota: smoke: the forward pass agrees with the host's on {len(SMOKE_PROMPTS)} prompt(s)"


def flip_weight(release: Path, tensor: str) -> None:
    """Flips an upper exponent bit of ``tensor``'s first float32 in the release's partition
    file (its value grows 2^128-fold, to an infinity for a value near 1, or shrinks 2^32-fold:
    ``quant_blocks.flipped`` on its high byte) and writes the file's new sha256 into release.json, as
    weights damaged before their digests were taken would be: every digest agrees, and the
    regions loaded before still hold the partition's old bytes, which is what `q25tok verify`
    checks against the region table; only the forward pass (on the files) can tell."""
    tab = (release / "partitions" / "tensors.tab").read_text()
    _, _, kind, region, offset, _, _ = re.search(rf"^{re.escape(tensor)} .*$", tab, re.M).group(0).split()
    assert kind == "F32"
    rows = [ln.split() for ln in (release / "partitions" / "regions.tab").read_text().splitlines() if ln[:1] != "#"]
    part = release / "partitions" / rows[int(region)][3]
    old = hashlib.sha256(part.read_bytes()).hexdigest()
    with open(part, "r+b") as f:
        f.seek(int(offset, 16) + 3)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([flipped(byte)]))
    rj = release / "release.json"
    text = rj.read_text()
    assert text.count(old) == 1
    rj.write_text(text.replace(old, hashlib.sha256(part.read_bytes()).hexdigest()))


def test_the_commit_runs_the_model_and_a_damaged_weight_fails_it_naming_the_layer(
    tmp_path, bb, q25tok_bin, ota_builds, arts
):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"], ota_builds["B"])
    assert AGREES in ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    before = layout(board)
    tree = mender_tree(arts["B"], tmp_path / "tree")
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    current = board / INSTALL / "current"
    flip_weight(current.parent / current.readlink(), "blk.1.attn_norm.weight")
    commit = sh(bb, board, "ArtifactCommit", str(tree))
    assert commit.returncode == 1
    assert commit.stderr.count("forward prompt") == 1, commit.stderr  # B's artifact: the first prompt only
    assert "verify: the reserved regions hold" in commit.stderr  # the bytes the regions hold were not touched
    err = commit.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"q25-ota: smoke: forward prompt 0 step 0: layer 1: (norm \S+|the board state is not finite \(norm \S+\)), host \S+",
        err,
    ), err
    assert sh(bb, board, "ArtifactRollback", str(tree)).returncode == 0
    assert sh(bb, board, "Cleanup", str(tree)).returncode == 0
    assert {k: v for k, v in layout(board).items() if k != ".q25deploy-loaded"} == {
        k: v for k, v in before.items() if k != ".q25deploy-loaded"
    }


def test_a_tokenizer_only_update_has_no_forward_pass_to_check(tmp_path, bb, q25tok_bin, ota_builds, arts):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    log = ok(mender_install(bb, board, arts["A2-tok"], tmp_path / "tree"))
    assert "forward" not in log and "smoke test passed" in log


def fake_generate(board: Path, script: str, command: str = "generate") -> None:
    """The board's q25tok runs ``script`` (sh) for ``command``, the real q25tok for the rest."""
    real = board / "usr" / "bin" / "q25tok.real"
    q = board / "usr" / "bin" / "q25tok"
    q.rename(real)
    q.write_text(f'#!/bin/sh\nif [ "$1" = {command} ]; then\n{script}\nfi\nexec {real} "$@"\n')
    q.chmod(0o755)


@pytest.mark.parametrize(
    ("script", "status", "says", "command"),
    [
        (  # a usage error is a failure: the q25tok that runs `ota` has generate --positions and compare
            'echo "usage: q25tok info IMAGE" >&2; exit 2',
            1,
            r"q25-ota: smoke: forward prompt 0: q25tok generate failed \(exit 2\): usage: q25tok info IMAGE",
            "generate",
        ),
        (
            'echo "q25tok: generate: a tensor is missing: output.weight" >&2; exit 8',
            1,
            r"q25-ota: smoke: forward prompt 0: q25tok generate failed \(exit 8\): "
            r"q25tok: generate: a tensor is missing: output.weight",
            "generate",
        ),
        (  # generate's own usage: our command line is wrong, not the image old
            'echo "usage: q25tok generate [--mem PATH] [--steps N | --positions N] ..." >&2; exit 2',
            1,
            r"q25-ota: smoke: forward prompt 0: q25tok generate failed \(exit 2\): usage: q25tok generate .*",
            "generate",
        ),
        (
            'echo "step 0 pos 1 token 2"; exit 0',
            1,
            r"q25-ota: smoke: forward prompt 0: q25tok: compare: \S+: q25tok generate's line 1: "
            r"a line before the first step: 'step 0 pos 1 token 2'",
            "generate",
        ),
        (
            'echo "usage: q25tok info IMAGE" >&2; exit 2',
            1,
            r"q25-ota: smoke: forward prompt 0: usage: q25tok info IMAGE",
            "compare",
        ),
        (  # compare's own usage: our command line is wrong, not the image old
            'echo "usage: q25tok compare EXPECTED PROMPT DUMP" >&2; exit 2',
            1,
            r"q25-ota: smoke: forward prompt 0: usage: q25tok compare EXPECTED PROMPT DUMP",
            "compare",
        ),
    ],
)
def test_what_generate_cannot_answer(tmp_path, bb, q25tok_bin, ota_builds, arts, script, status, says, command):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    fake_generate(board, script, command)
    tree = mender_tree(arts["A"], tmp_path / "tree")
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    commit = sh(bb, board, "ArtifactCommit", str(tree))
    assert commit.returncode == status
    lines = commit.stderr.strip().splitlines()
    assert any(re.fullmatch(says, ln.strip()) for ln in lines), commit.stderr
    assert ("smoke test passed" in commit.stderr) == (status == 0)


@pytest.mark.parametrize(
    ("pattern", "repl", "why"),
    [
        (r"^(forward) \S+$", r"\1 ../q25-forward.txt", "bad forward line"),
        (r"^(forward \S+)$", r"\1 extra", "bad forward line"),
        (r"^(forward) \S+$", r"\1 q25-plan", "bad forward line"),
        (r"^(forward \S+)$", r"\1\n\1", "more than one forward line"),
    ],
)
def test_the_forward_line_is_checked(tmp_path, bb, q25tok_bin, ota_builds, arts, pattern, repl, why):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    tree = mender_tree(arts["A"], tmp_path / "tree")
    plan = tree / "files" / "q25-plan"
    text, n = re.subn(pattern, repl, plan.read_text(), flags=re.M)
    assert n == 1
    plan.write_text(text)
    r = sh(bb, board, "ArtifactInstall", str(tree))
    assert r.returncode == 1 and why in r.stderr and layout(board) == {}


def test_a_forward_line_in_a_tokenizer_only_plan_is_refused(tmp_path, bb, q25tok_bin, ota_builds, arts):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    ok(mender_install(bb, board, arts["A"], tmp_path / "tree"))
    before = layout(board)
    tree = mender_tree(arts["A2-tok"], tmp_path / "tree")
    plan = tree / "files" / "q25-plan"
    plan.write_text(plan.read_text() + "forward q25-forward.txt\n")
    r = sh(bb, board, "ArtifactInstall", str(tree))
    assert r.returncode == 1 and "a forward line in a tokenizer-only plan" in r.stderr and layout(board) == before


def test_a_bad_prompt_line_in_the_forward_file_fails_the_smoke(tmp_path, bb, q25tok_bin, ota_builds, arts):
    board = make_board(tmp_path / "board", q25tok_bin, ota_builds["A"])
    tree = mender_tree(arts["A"], tmp_path / "tree")
    fwd = tree / "files" / "q25-forward.txt"
    fwd.write_text(
        re.sub(r"^prompt 2 steps (\d+) ids ", r"prompt 2 steps \1 ids $(reboot),", fwd.read_text(), flags=re.M)
    )
    assert sh(bb, board, "ArtifactInstall", str(tree)).returncode == 0
    commit = sh(bb, board, "ArtifactCommit", str(tree))
    assert commit.returncode == 1 and "bad prompt line '2'" in commit.stderr
