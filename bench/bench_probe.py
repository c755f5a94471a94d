#!/usr/bin/env python3
"""The tensor probe's time (``q25tok probe --files``, the smoke prompts' ids), on this machine
and on aarch64 under qemu-aarch64 (-cpu cortex-a53), for a build of the tiny and of a Qwen2.5
0.5B-shaped model; each run's lines are checked against the build's probe_digests.json. The
time on the emulated board (through /dev/mem): tests/deploy/emulated/test_board_probe.py prints it.

    python3 bench/bench_probe.py [--presets tiny,0.5b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from q25deploy.cli import main as q25deploy  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402
from q25deploy.packer.probe import mismatches  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402

VOCAB = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,0.5b")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        build_runtime(tmp / "host")
        build_runtime(tmp / "arm", cross="aarch64")
        machines = {
            "host": [str(tmp / "host" / "q25tok")],
            "qemu-aarch64": [
                "qemu-aarch64",
                "-cpu",
                "cortex-a53",
                "-L",
                "/usr/aarch64-linux-gnu",
                str(tmp / "arm" / "q25tok"),
            ],
        }
        for preset in args.presets.split(","):
            model, out = tmp / f"{preset}.gguf", tmp / preset
            write_model(model, preset, str(VOCAB))
            assert q25deploy(["build", "--target", "qemu", "--model", str(model), "--out", str(out)]) == 0
            record = json.loads((out / "probe_digests.json").read_text())
            tables = [str(out / "partitions" / "regions.tab"), str(out / "partitions" / "tensors.tab")]
            for machine, exe in machines.items():
                best = None
                for _ in range(3):
                    s, lines = timed([*exe, "probe", "--files", *tables, *map(str, record["ids"])])
                    assert mismatches(record, lines) == [], f"{preset} on {machine} differs from the build"
                    best = s if best is None else min(best, s)
                print(
                    f"{preset}: {len(record['tensors'])} tensors, {len(record['ids'])} embedding rows, "
                    f"{machine}: {best:.3f} s (best of 3)"
                )


if __name__ == "__main__":
    main()
