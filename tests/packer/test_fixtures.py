"""``q25deploy export fixtures``: the files hold the GGUF's blocks and gguf-py's values, the same
bytes every run, and docs/fixtures.md's testbench recomputes them with the C runtime."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from requirements import need_program

from q25deploy.cli import main
from q25deploy.packer.runtime import SANITIZE_FLAGS
from q25deploy.resources import runtime_library_sources, runtime_sources

DOC = Path(__file__).resolve().parents[2] / "docs" / "fixtures.md"


def export(model: Path, out: Path, *extra: str) -> dict:
    assert main(["export", "fixtures", str(model), "--out", str(out), *extra]) == 0
    return json.loads((out / "fixtures.json").read_text())


def test_files_hold_the_gguf_blocks_and_gguf_py_values(tmp_path, qwen25_tiny):
    index = export(qwen25_tiny, tmp_path / "fx")
    fx = tmp_path / "fx"
    files = {k: (fx / rel).read_bytes() for k, rel in index["files"].items()}
    src = qwen25_tiny.read_bytes()
    assert {e["type"] for e in index["fixtures"]} == {"F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"}
    for e in index["fixtures"]:
        n, o = e["shape"][0], e["offsets"]
        blocks = files["blocks"][o["blocks"] : o["blocks"] + len(e["rows"]) * e["row_bytes"]]
        assert blocks == b"".join(src[s : s + e["row_bytes"]] for s in e["row_source_offsets"])
        with np.errstate(all="ignore"):
            ref = dequantize(np.frombuffer(blocks, np.uint8), Q[e["type"]]).astype(np.float32).reshape(-1)
        values = np.frombuffer(files["values"], "<f4", len(e["rows"]) * n, o["values"])
        assert values.tobytes() == ref.tobytes()
        x = np.frombuffer(files["x"], "<f4", n, o["x"])
        dot64 = np.frombuffer(files["dot_f64"], "<f8", len(e["rows"]), o["dot_f64"])
        dot32 = np.frombuffer(files["dot_f32"], "<f4", len(e["rows"]), o["dot_f32"])
        for r, row in enumerate(values.reshape(len(e["rows"]), n)):
            assert e["nonfinite_values"] == 0  # the tiny model has finite rows to choose
            assert dot64[r] == math.fsum(float(a) * float(b) for a, b in zip(row, x))
            assert abs(float(dot32[r]) - dot64[r]) <= e["tolerance"]["dot_f32_any_order"][r]


def test_two_runs_give_the_same_bytes(tmp_path, qwen25_tiny):
    a = export(
        qwen25_tiny, tmp_path / "a", "--tensor", "blk.1.ffn_down.weight", "--tensor", "token_embd.weight", "--rows", "3"
    )
    export(
        qwen25_tiny, tmp_path / "b", "--tensor", "blk.1.ffn_down.weight", "--tensor", "token_embd.weight", "--rows", "3"
    )
    assert [(e["name"], len(e["rows"])) for e in a["fixtures"]] == [
        ("blk.1.ffn_down.weight", 3),
        ("token_embd.weight", 3),
    ]
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_the_header_holds_the_files(tmp_path, qwen25_tiny):
    index = export(qwen25_tiny, tmp_path / "fx")
    header = (tmp_path / "fx" / "q25_fixtures.h").read_text()

    def array(name: str) -> list[str]:
        return re.search(rf"{name}\[\d+\] = {{\n(.*?)\n}};", header, re.DOTALL).group(1).replace("\n", " ").split(", ")

    files = {k: (tmp_path / "fx" / rel).read_bytes() for k, rel in index["files"].items()}
    assert bytes(int(b, 16) for b in array("q25fx_blocks")) == files["blocks"]
    assert np.array([int(w[:-1], 16) for w in array("q25fx_values")], "<u4").tobytes() == files["values"]
    assert np.array([float.fromhex(v[:-1]) for v in array("q25fx_x")], "<f4").tobytes() == files["x"]
    assert np.array([int(w[:-3], 16) for w in array("q25fx_dot_f64")], "<u8").tobytes() == files["dot_f64"]


def test_the_documented_testbench_recomputes_every_fixture(tmp_path, qwen25_tiny):
    cc = need_program("cc", "Debian: gcc")
    export(qwen25_tiny, tmp_path / "fx")
    example = re.search(r"```c\n(.*?)```", DOC.read_text(), re.DOTALL).group(1)
    (tmp_path / "testbench.c").write_text(example)
    exe = tmp_path / "testbench"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",
            "-ffp-contract=off",
            "-Wall",
            "-Wextra",
            "-Werror",
            *SANITIZE_FLAGS.replace("-O1", "").split(),
            "-I",
            str(tmp_path / "fx"),
            "-I",
            str(runtime_sources()),
            str(tmp_path / "testbench.c"),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
        ],
        check=True,
    )
    r = subprocess.run([exe], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout) == (0, "8 tensors, 0 mismatches\n"), r.stderr
    # a flipped bit in one block is seen
    h = tmp_path / "fx" / "q25_fixtures.h"
    h.write_text(
        re.sub(
            r"(q25fx_blocks\[\d+\] = \{\n0x)([0-9a-f]{2})",
            lambda m: m.group(1) + f"{int(m.group(2), 16) ^ 1:02x}",
            h.read_text(),
            count=1,
        )
    )
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",
            "-ffp-contract=off",
            "-I",
            str(tmp_path / "fx"),
            "-I",
            str(runtime_sources()),
            str(tmp_path / "testbench.c"),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
        ],
        check=True,
    )
    r = subprocess.run([exe], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and r.stdout.endswith(" mismatches\n") and "0 mismatches" not in r.stdout


def test_bad_input_is_one_line(tmp_path, qwen25_tiny, capsys):
    cases = [
        (["--tensor", "blk.9.nothing"], "no tensor 'blk.9.nothing' in the model"),
        (["--rows", "0"], "--rows 0: give at least one row"),
    ]
    for extra, message in cases:
        code = main(["export", "fixtures", str(qwen25_tiny), "--out", str(tmp_path / "fx"), *extra])
        err = capsys.readouterr().err
        assert code != 0 and message in err and err.count("\n") == 1 and "Traceback" not in err
        assert not (tmp_path / "fx").exists()
    code = main(["export", "fixtures", str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "fx")])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and not (tmp_path / "fx").exists()
    (tmp_path / "file").write_text("not a directory")
    code = main(["export", "fixtures", str(qwen25_tiny), "--out", str(tmp_path / "file")])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and (tmp_path / "file").read_text() == "not a directory"
