#!/usr/bin/env python3
"""`q25deploy build` benchmark, side by side in one run on Qwen2.5-shaped Q4_K_M models
(0.5B ~398 MB and 1.5B ~986 MB, written first unless given):

- the build (whole command, fresh output directory, model digest already cached as after a
  first build or an Ollama pull) against `cp` of the same file (goal: build <= cp + 1 s);
- a no-op rebuild (goal <= 0.3 s);
- peak RSS of the build (goal <= 200 MB and not growing with model size).

    python3 bench/bench_build.py [--target kv260] [--skip-1.5b]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from q25deploy.model.demo import vocab_path  # noqa: E402
from q25deploy.model.source import file_sha256  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402


def run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a command."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.execvp(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status:
        raise SystemExit(f"{cmd} failed ({status})")
    return wall, usage.ru_maxrss


def best(cmd, n=3, prep=None):
    results = []
    for _ in range(n):
        if prep:
            prep()
        results.append(run(cmd))
    return min(r[0] for r in results), max(r[1] for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="kv260")
    ap.add_argument("--skip-1.5b", dest="skip15", action="store_true")
    a = ap.parse_args()
    exe = shutil.which("q25deploy")
    if not exe:
        raise SystemExit("install q25deploy first (pip install .)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        os.environ["XDG_CACHE_HOME"] = str(cache)  # the builds' cache, not the user's
        rows = []
        for preset in ("0.5b",) + (() if a.skip15 else ("1.5b",)):
            model = tmp / f"qwen25-{preset}.gguf"
            write_model(model, preset, str(vocab_path()))
            file_sha256(model, cache / "q25deploy")  # the digest a first build or an Ollama pull leaves
            out = tmp / "out"
            cp_t, _ = best(
                ["cp", str(model), str(tmp / "copy.gguf")], prep=lambda: (tmp / "copy.gguf").unlink(missing_ok=True)
            )
            build_cmd = [exe, "build", "--target", a.target, "--model", str(model), "--out", str(out)]

            def cold(out=out):  # a fresh output directory and an empty tokenizer cache
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(cache / "q25deploy" / "tokenizer", ignore_errors=True)

            with open(os.devnull, "w") as nul:
                saved = os.dup(1)
                os.dup2(nul.fileno(), 1)
                c_t, c_rss = best(build_cmd, prep=cold)
                w_t, w_rss = best(build_cmd, prep=lambda out=out: shutil.rmtree(out, ignore_errors=True))
                n_t, n_rss = best(build_cmd, n=5)
                os.dup2(saved, 1)
            size = model.stat().st_size / 1e6
            rows.append((preset, size, cp_t, c_t, w_t, n_t, max(c_rss, w_rss) / 1024))
            model.unlink()
            (tmp / "copy.gguf").unlink(missing_ok=True)
            shutil.rmtree(out, ignore_errors=True)
    print(f"target {a.target}; best of 3 (no-op: of 5); model digest cached (as after a first build or an Ollama pull)")
    print("cold: empty tokenizer cache (first build of this model); warm: tokenizer assets in the cache")
    print(
        f"{'model':<6} {'size':>8} {'cp':>7} {'cold':>7} {'cold-cp':>8} {'warm':>7} {'warm-cp':>8} {'no-op':>7} "
        f"{'peak RSS':>9}"
    )
    for preset, size, cp_t, c_t, w_t, n_t, rss in rows:
        print(
            f"{preset:<6} {size:>6.0f}MB {cp_t:>6.2f}s {c_t:>6.2f}s {c_t - cp_t:>+7.2f}s {w_t:>6.2f}s "
            f"{w_t - cp_t:>+7.2f}s {n_t:>6.3f}s {rss:>7.0f}MB"
        )
    print("goals: build <= cp + 1 s; no-op <= 0.3 s; peak RSS <= 200 MB, flat with model size")


if __name__ == "__main__":
    main()
