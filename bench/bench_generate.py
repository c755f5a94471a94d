#!/usr/bin/env python3
"""`q25tok generate` against llama.cpp on the same GGUF, both built for aarch64 and run under
qemu-aarch64 -cpu cortex-a53 in one run: the smoke test's first prompt and N greedy tokens,
for a build of the tiny and of a Qwen2.5 0.5B-shaped model. llama.cpp is its `llama-completion`
tool (greedy: --temp 0, no warm-up pass, no conversation mode), cross-built (static, armv8-a,
the Debian cross toolchain) from the sources that ship in llama-cpp-python's sdist; our side is
`q25tok generate --files` (the partition files, page cache: what the board's CPU should read,
docs/runtime.md). Each side is timed as a whole process (model load, prompt, N tokens), best
of --repeat, in wall time and in CPU time (user + system over all threads; on a busy host the
CPU time is the steadier figure). --threads 1,4 runs both under qemu once per thread count
(q25tok --threads N, llama.cpp -t N; a row each; q25tok's lines must be the same), e.g. the
board's four A53 cores against one; --q25tok-only leaves llama.cpp out (no sdist needed). --check times, instead, the smoke
test's forward check of the first prompt as the board runs it under qemu: `generate --positions
N` on the prompt and its forced continuation (one batched pass, docs/forward.md) beside greedy
`--steps N` on the prompt (N passes), per thread count. The native host build (one thread) of q25tok and the host's numpy reference
(q25deploy/model, a fresh Python process: imports, the GGUF's weights dequantised, the prompt
and N tokens) are timed too, for scale. Tokens per second = N / the wall time.

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/sdist
    python3 bench/bench_generate.py --sdist /tmp/sdist/llama_cpp_python-0.3.36.tar.gz
    python3 bench/bench_generate.py --llama BUILD/bin/llama-completion   # already built
    python3 bench/bench_generate.py --q25tok-only --presets 0.5b --threads 1,4 --repeat 1
    python3 bench/bench_generate.py --check --presets tiny,0.5b --threads 1,4 --repeat 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "runtime")]

from q25deploy.builddir import BuildDir  # noqa: E402
from q25deploy.cli import main as q25deploy  # noqa: E402
from q25deploy.model.generate import continuation  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402

VOCAB = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"
# the host reference on one prompt, as the build runs it for its forward record (docs/forward.md)
REFERENCE = """import sys
sys.path.insert(0, sys.argv.pop(1))
from q25deploy.model.forward import Forward
from q25deploy.model.generate import greedy
from q25deploy.model.gguf import GGUFFile
from q25deploy.model.weights import Weights
from q25deploy.packer.forward_record import fed_ids, runnable
f = GGUFFile(sys.argv[1])
hp = runnable(f)
run = greedy(Forward(Weights(f), hp), fed_ids(hp, [[int(i) for i in sys.argv[3:]]]), int(sys.argv[2]))[0]
print(*("step %d token %d" % (i, s["token"]) for i, s in enumerate(run)), sep="\\n")
"""
QEMU = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", "/usr/aarch64-linux-gnu"]
CMAKE_FLAGS = [
    "-DCMAKE_SYSTEM_NAME=Linux",
    "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
    "-DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc",
    "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_CPU_ARM_ARCH=armv8-a",  # the A53: no dot-product or i8mm instructions
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_OPENMP=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",  # llama-completion: -t N (llama-simple always runs 4 threads)
    "-DCMAKE_EXE_LINKER_FLAGS=-static",
]


def build_llama(sdist: Path, work: Path) -> Path:
    """llama.cpp's llama-completion for aarch64 from llama-cpp-python's sdist (vendor/llama.cpp)."""
    with tarfile.open(sdist) as t:
        t.extractall(work, filter="data")
    src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    build = work / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS], check=True, capture_output=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-completion", "-j", jobs], check=True)
    return build / "bin" / "llama-completion"


def timed(cmd: list[str], repeat: int) -> tuple[float, float, str, str]:
    """Best wall time and best CPU time (user + system, all threads) of repeat runs."""
    best, cpu, out, err = None, None, "", ""
    for _ in range(repeat):
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        s, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        c = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        best, cpu = (s if best is None else min(best, s)), (c if cpu is None else min(cpu, c))
        out, err = r.stdout, r.stderr
    assert best is not None and cpu is not None
    return best, cpu, out, err


def hparams(build: Path, model: Path) -> Path:
    hp = build / "model_hparams.txt"
    if not hp.exists():  # a build by a q25deploy that does not write it yet
        from test_generate import hparams_text

        hp.write_text(hparams_text(model))
    return hp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,0.5b")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", default="1", help="q25tok's --threads under qemu, a comma-separated list (1)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--sdist", type=Path, help="llama-cpp-python's sdist (.tar.gz): build llama-completion from it")
    g.add_argument("--llama", type=Path, help="an aarch64 llama-completion already built")
    g.add_argument("--q25tok-only", action="store_true", help="time q25tok alone (no llama.cpp)")
    g.add_argument("--check", action="store_true", help="the smoke test's forward check: --positions against --steps")
    args = ap.parse_args()
    if args.check:
        return forward_check(args)
    thread_counts = [int(n) for n in args.threads.split(",")]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        llama_bin = None if args.q25tok_only else args.llama or build_llama(args.sdist, tmp / "llama")
        build_runtime(tmp / "host")
        build_runtime(tmp / "arm", cross="aarch64")
        print(
            "| model | steps | q25tok threads | q25tok qemu-a53 wall / CPU | llama.cpp qemu-a53 wall / CPU "
            "| ratio wall / CPU | q25tok host | numpy reference host |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for preset in args.presets.split(","):
            model, out = tmp / f"{preset}.gguf", tmp / preset
            write_model(model, preset, str(VOCAB))
            with contextlib.redirect_stdout(sys.stderr):  # the build's summary, away from the table
                assert q25deploy(["build", "--target", "qemu", "--model", str(model), "--out", str(out)]) == 0
            text, _, ids = BuildDir(out).smoke_ids[1][0]
            tables = [str(out / "partitions" / "regions.tab"), str(out / "partitions" / "tensors.tab")]
            gen = ["generate", "--files", "--steps", str(args.steps), "--hparams", str(hparams(out, model))]
            host, _, host_lines, _ = timed(
                [str(tmp / "host" / "q25tok"), *gen, "--threads", "1", *tables, *map(str, ids)], 1
            )
            host_steps = [ln for ln in host_lines.splitlines() if ln.startswith("step")]
            py = [sys.executable, "-c", REFERENCE, str(ROOT), str(model), str(args.steps), *map(str, ids)]
            ref, _, ref_lines, _ = timed(py, 1)
            if [ln.split()[3] for ln in ref_lines.splitlines()] != [ln.split()[5] for ln in host_steps]:
                print(f"{preset}: the reference's tokens differ from q25tok's (a near tie?)", file=sys.stderr)
            n = args.steps
            for threads in thread_counts:
                llama_cell, llama = "not run", None
                if llama_bin is not None:
                    flags = ["-n", str(n), "-t", str(threads), "--temp", "0", "-no-cnv", "--no-warmup", "-c", "256"]
                    cmd = [*QEMU, str(llama_bin), "-m", str(model), *flags, "-p", text.decode()]
                    llama, llama_cpu, _, err = timed(cmd, args.repeat)
                    e = re.search(r"\beval time =\s+([\d.]+) ms /\s+(\d+) runs", err)
                    inner = f"; {float(e[1]) / int(e[2]):.0f} ms per token after the prompt" if e else ""
                    llama_cell = f"{llama:.2f} / {llama_cpu:.2f} s ({n / llama:.2f} tok/s{inner})"
                arm = [*QEMU, str(tmp / "arm" / "q25tok"), *gen, "--threads", str(threads), *tables, *map(str, ids)]
                ours, ours_cpu, lines, _ = timed(arm, args.repeat)
                # the same tokens as the host build; the margins too where every product is an
                # integer one (q25tok_qrow.c: the same bits on NEON and SSE2), else only close
                arm_steps = [ln for ln in lines.splitlines() if ln.startswith("step")]
                assert [ln.split()[:6] for ln in arm_steps] == [ln.split()[:6] for ln in host_steps]
                margins = [abs(float(a.split()[7]) - float(h.split()[7])) for a, h in zip(arm_steps, host_steps)]
                print(f"{preset}, {threads} threads: margins within {max(margins):.3g} of the host's", file=sys.stderr)
                ratio = f"{ours / llama:.2f}x / {ours_cpu / llama_cpu:.2f}x" if llama is not None else "-"
                print(
                    f"| {preset}, {len(ids)}-token prompt | {n} | {threads} "
                    f"| {ours:.2f} / {ours_cpu:.2f} s ({n / ours:.2f} tok/s) | {llama_cell} | {ratio} "
                    f"| {host:.2f} s ({n / host:.1f} tok/s) | {ref:.2f} s ({n / ref:.1f} tok/s) |",
                    flush=True,
                )


def forward_check(args) -> None:
    """The smoke test's forward check of the first prompt under qemu-aarch64 -cpu cortex-a53:
    teacher-forced (--positions, what the check runs) against greedy (--steps, N passes)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        build_runtime(tmp / "arm", cross="aarch64")
        print(
            "| model | positions | q25tok threads | greedy `--steps` wall / CPU | forced `--positions` wall / CPU | ratio |"
        )
        print("|---|---|---|---|---|---|")
        for preset in args.presets.split(","):
            model, out = tmp / f"{preset}.gguf", tmp / preset
            write_model(model, preset, str(VOCAB))
            with contextlib.redirect_stdout(sys.stderr):
                assert q25deploy(["build", "--target", "qemu", "--model", str(model), "--out", str(out)]) == 0
            ids = BuildDir(out).smoke_ids[1][0][2]
            tables = [str(out / "partitions" / "regions.tab"), str(out / "partitions" / "tensors.tab")]
            n, arm = args.steps, [*QEMU, str(tmp / "arm" / "q25tok"), "generate", "--files", "--dump-layers"]
            fed = [*ids, *continuation(ids, n)]
            for threads in [int(t) for t in args.threads.split(",")]:
                th = ["--threads", str(threads), *tables]
                g, g_cpu, _, _ = timed([*arm, "--steps", str(n), *th, *map(str, ids)], args.repeat)
                f, f_cpu, _, _ = timed([*arm, "--positions", str(n), *th, *map(str, fed)], args.repeat)
                print(
                    f"| {preset}, {len(ids)}-token prompt | {n} | {threads} | {g:.2f} / {g_cpu:.2f} s "
                    f"| {f:.2f} / {f_cpu:.2f} s | {f / g:.2f}x / {f_cpu / g_cpu:.2f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
