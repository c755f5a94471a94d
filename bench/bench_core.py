#!/usr/bin/env python3
"""Core packer benchmark: prints, side by side in one run,

- `inspect` (q25deploy's reader + catalog) against `gguf.GGUFReader` opening the same file,
  on the Qwen2 vocabulary fixture (goal: >= 20x faster);
- `export tokenizer` time on the vocabulary fixture and on the 0.5B-shaped Q4_K_M test model
  (written to a temporary directory first unless --model is given).

    python3 bench/bench_core.py [--repeat N] [--model PATH] [--skip-model]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gguf import GGUFReader  # noqa: E402

from q25deploy.cli import main as cli_main  # noqa: E402
from q25deploy.model.catalog import build_catalog  # noqa: E402
from q25deploy.model.gguf import GGUFFile  # noqa: E402
from q25deploy.model.source import resolve  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402

VOCAB = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ours_inspect(path: Path) -> None:
    src = resolve(str(path))
    with GGUFFile(src.path) as f:
        build_catalog(src, f)


def export(path: Path, out: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["export", "tokenizer", str(path), "--out", str(out)]) == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", type=Path, help="a 0.5B-sized GGUF to export (default: generate one)")
    ap.add_argument("--skip-model", action="store_true", help="only the vocabulary fixture")
    a = ap.parse_args()

    ours = timed(lambda: ours_inspect(VOCAB), a.repeat)
    ref = timed(lambda: GGUFReader(VOCAB), max(1, min(a.repeat, 2)))
    rows = [
        (
            "inspect, vocab fixture (6 MB)",
            f"{ours * 1000:.1f} ms",
            f"gguf.GGUFReader {ref * 1000:.0f} ms",
            f"{ref / ours:.0f}x faster (goal >= 20x)",
        )
    ]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = timed(lambda: export(VOCAB, tmp / "vocab-out"), a.repeat)
        rows.append(("export tokenizer, vocab fixture", f"{t:.2f} s", "", ""))
        if not a.skip_model:
            model = a.model
            if model is None:
                model = tmp / "qwen25-0.5b.gguf"
                t0 = time.perf_counter()
                write_model(model, "0.5b", str(VOCAB))
                print(f"(wrote the 0.5B test model in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
            size = model.stat().st_size
            t = timed(lambda: export(model, tmp / "model-out"), max(1, a.repeat // 2))
            ti = timed(lambda: ours_inspect(model), a.repeat)
            rows.append((f"export tokenizer, 0.5B Q4_K_M ({size / 1e6:.0f} MB)", f"{t:.2f} s", "", ""))
            rows.append((f"inspect, 0.5B Q4_K_M ({size / 1e6:.0f} MB)", f"{ti * 1000:.1f} ms", "", ""))
    w = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{w}}  {'q25deploy':>10}  {'baseline':<22}  ratio")
    for name, ours_s, base, ratio in rows:
        print(f"{name:<{w}}  {ours_s:>10}  {base:<22}  {ratio}")


if __name__ == "__main__":
    main()
