#!/usr/bin/env python3
"""`q25deploy build` against `cp`, side by side in one run, at every model size: the 0.5B-,
1.5B- and 3B-shaped Qwen2.5 Q4_K_M models (q25deploy.model.synthetic presets, ~398 MB, ~1 GB,
~2 GB; written into --dir first unless there, deleted at the end if written).

Every figure is a fresh process, as a user types it (`q25deploy build --target T --model M
--out DIR --json`), timed by this script around fork/exec/wait4, with the process's peak RSS
from wait4. The q25deploy timed is the tree under test installed as the README installs it,
`pip install .` into a virtual environment of its own (--venv, made on first use; with its
bytecode, and without an editable install's import hook or another site's .pth files, which
slow every start in a way no user's does); --in-tree times the tree on PYTHONPATH
with whatever `q25deploy` is on PATH instead. Rows per model:

- `cp` of the model (page cache warm: the build reads the same cached bytes), best of N,
  interleaved with the warm build so both see the same load;
- the warm build: a fresh output directory, the same build made before (the plan cache has
  it: only the partitions are made, from the GGUF): what an engineer's rebuild costs when only
  the output directory is new. Goal: <= 2x `cp` at 1.5B and 3B, <= 4x at 0.5B;
- the warm build without a plan-cache entry: the model built before (its digest, tokenizer
  assets and payload digests in the content caches) but not this build (another board file,
  other options): every stage runs;
- a new plan: the model known, this plan's partition digests not (another board, a board file
  that moves regions): the partitions are hashed in the copy's one pass;
- the first build: every cache empty (the model's digest, the tokenizer, every digest), once;
- the no-op rebuild (goal <= 0.3 s), best of 5, beside `python3 -c pass` and
  `q25deploy --version` (the interpreter's and the command line's start), best of 5 each;
- peak RSS over all these builds but the first, and the first build's (goal <= 200 MB at
  every size).

Content-keyed cached work gets its own column, cold and warm, out of the warm build's figure:
the tokenizer assets (cold = the first build, warm = the build without a plan-cache entry), the
payload digests (cold = first build / new plan), the whole build but its partitions (cold = the
first build, warm = the warm build). The reference forward pass for the smoke test (the one
expensive piece of it) has its own table: the record alone in a fresh process, cold (its cache
entry removed) and warm (read and checked), time and peak RSS each, beside the first build
without it (every cache empty but the record's) and with it.

    python3 bench/bench_build.py [--dir /work/tmp-bench] [--sizes 0.5b,1.5b,3b] [--repeat 3]
                                 [--alignment 4096] [--keep-models] [--venv DIR | --in-tree]

On XFS or Btrfs, `cp` shares the file's blocks (coreutils >= 9: --reflink=auto) and the build
shares every tensor's whole blocks when the GGUF's tensors are block aligned (--alignment 4096);
the summary line under the table says how many bytes were shared and copied.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from q25deploy.model.synthetic import write_model  # noqa: E402

VOCAB = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"


PHASES = ("imports", "plan", "tokenizer", "payload", "board files", "layer", "probe", "commit", "end")
STARTS: dict[str, float] = {}  # Q25_PHASE_TIMES file -> time.monotonic() at the fork


def run(cmd: list[str], env: dict, stdout: Path | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of a fresh process, from fork to wait4."""
    if env.get("Q25_PHASE_TIMES"):
        STARTS[env["Q25_PHASE_TIMES"]] = time.monotonic()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: stdout to a file (or nowhere), then the command
        try:
            fd = os.open(stdout or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.execvpe(cmd[0], cmd, env)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status:
        raise SystemExit(f"{' '.join(cmd)} failed (wait status {status})")
    return wall, usage.ru_maxrss * 1024


def installed(venv: Path) -> tuple[list[str], str]:
    """The tree under test installed into ``venv`` (``pip install .``; its dependencies the
    first time): its ``q25deploy`` command and its interpreter."""
    import subprocess

    python = venv / "bin" / "python"
    first = not python.exists()
    if first:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *([] if first else ["--no-deps", "--force-reinstall"]), str(ROOT)], check=True)
    return [str(venv / "bin" / "q25deploy")], str(python)


def drop_builds(cache: Path) -> None:
    """Forget every build the plan cache holds: the next build runs every stage."""
    shutil.rmtree(cache / "q25deploy" / "plans", ignore_errors=True)


def drop_plans(cache: Path) -> None:
    """Forget every plan's partition digests (the tensors' stay) and every build: the next
    build hashes its partitions."""
    drop_builds(cache)
    for entry in (cache / "q25deploy" / "payload").glob("*.json"):
        doc = json.loads(entry.read_text())
        doc["partitions"] = []
        entry.write_text(json.dumps(doc))


def drop_all_but_record(cache: Path) -> None:
    """Empty every cache but the reference forward pass's (``q25deploy/forward``): the next
    build is a first build of a model whose record was computed before."""
    root = cache / "q25deploy"
    for entry in root.iterdir() if root.is_dir() else ():
        if entry.name != "forward":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


# The reference forward pass on the smoke prompts alone, as the build runs it (its content
# cache looked up first): argv = model, the build's smoke_ids.json, the model's sha256, how
# many prompts the build recorded (build --forward: its default, the first).
RECORD = (
    "import json, os, sys\n"
    "from q25deploy.numerics import pin\n"
    "pin()  # as q25deploy's command line does, before numpy loads\n"
    "from q25deploy.model.gguf import GGUFFile\n"
    "from q25deploy.packer.forward_record import record_bytes\n"
    "ids = [p['ids'] for p in json.load(open(sys.argv[2]))['prompts']][: int(sys.argv[4])]\n"
    "with GGUFFile(sys.argv[1]) as f:\n"
    "    record_bytes(f, sys.argv[3], ids)\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, help="where models and builds go (default: a temporary directory)")
    ap.add_argument("--sizes", default="0.5b,1.5b,3b", help="synthetic presets, comma-separated")
    ap.add_argument("--target", default="kv260")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--alignment",
        type=int,
        help="the models' general.alignment (default GGUF's 32; 4096 lets a build on XFS/Btrfs share blocks)",
    )
    ap.add_argument("--keep-models", action="store_true", help="keep the models this run wrote")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--venv", type=Path, help="the virtual environment to install the tree into (default DIR/venv)")
    where.add_argument("--in-tree", action="store_true", help="time the tree on PYTHONPATH, not an installed copy")
    a = ap.parse_args()
    work = a.dir or Path(tempfile.mkdtemp(prefix="q25-bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    cache, out, copy = work / "cache", work / "out", work / "copy.gguf"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    if a.in_tree:
        exe, python = shutil.which("q25deploy"), sys.executable
        cmd0 = [exe] if exe else [python, "-m", "q25deploy"]
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    else:
        cmd0, python = installed(a.venv or work / "venv")
        env.pop("PYTHONPATH", None)
    # A user's installed q25deploy has its bytecode (pip compiles it at install time); a tree
    # run from source under PYTHONDONTWRITEBYTECODE (some sandboxes set it) would compile its
    # ~50 modules at every start, a cost no user pays. The first build writes __pycache__.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    rows, phase_rows, starts, records = [], [], [], []
    for preset in a.sizes.split(","):
        model = work / f"qwen25-{preset}{f'-a{a.alignment}' if a.alignment else ''}.gguf"
        wrote = not model.exists()
        if wrote:
            t0 = time.perf_counter()
            write_model(model, preset, str(VOCAB), alignment=a.alignment)
            print(f"(wrote {model.name} in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        build = [*cmd0, "build", "--target", a.target, "--model", str(model), "--out", str(out), "--json"]
        report = work / "report.json"

        def fresh() -> None:
            shutil.rmtree(out, ignore_errors=True)
            copy.unlink(missing_ok=True)

        fresh()
        shutil.rmtree(cache, ignore_errors=True)
        first, first_rss = run(build, env, report)  # every cache empty
        rss = 0  # the peak of every other build
        first_rep = json.loads(report.read_text())["payload"]
        smoke_ids = work / "smoke_ids.json"
        shutil.copyfile(out / "smoke_ids.json", smoke_ids)
        recorded = json.loads((out / "forward_record.json").read_text())
        model_sha, prompts = recorded["model_sha256"], str(len(recorded["prompts"]))
        record = [python, "-c", RECORD, str(model), str(smoke_ids), model_sha, prompts]
        fresh()
        drop_all_but_record(cache)
        bare, bare_rss = run(build, env, report)  # every cache empty but the record's
        record_warm = min(run(record, env) for _ in range(a.repeat))  # (s, RSS) of the best
        shutil.rmtree(cache / "q25deploy" / "forward")
        record_cold = run(record, env)  # computed again (and cached again)
        cps, warms = [], []
        best_phases: dict[str, float] = {}
        for _ in range(a.repeat):  # interleaved: cp, build, cp, build...
            fresh()
            cps.append(run(["cp", str(model), str(copy)], env)[0])
            fresh()
            marks = work / "phases.json"
            t, r = run(build, {**env, "Q25_PHASE_TIMES": str(marks)}, report)
            if t <= min(warms, default=t):  # the phases of the best run
                at = json.loads(marks.read_text())
                ends = [STARTS[str(marks)]] + [at.get(ph) for ph in PHASES]
                best_phases = {}
                for ph, k in zip(PHASES, range(1, len(ends))):
                    if ends[k] is not None:
                        best_phases[ph] = ends[k] - max(e for e in ends[:k] if e is not None)
            warms.append(t)
            rss = max(rss, r)
        warm_rep = json.loads(report.read_text())["payload"]

        def builds_after(forget, build: list[str] = build, report: Path = report) -> list[float]:
            """Fresh builds, each after ``forget`` dropped some of the caches (peak RSS into ``rss``)."""
            nonlocal rss
            times = []
            for _ in range(a.repeat):
                fresh()
                forget(cache)
                t, r = run(build, env, report)
                times.append(t)
                rss = max(rss, r)
            return times

        unplanned = builds_after(drop_builds)
        plans = builds_after(drop_plans)
        plan_rep = json.loads(report.read_text())["payload"]
        noops, passes, versions = [], [], []
        run(build, env)  # the full check writes the quick record of this command line
        for _ in range(5):
            passes.append(run([python, "-c", "pass"], env)[0])
            versions.append(run([*cmd0, "--version"], env)[0])
            t, r = run(build, env)
            noops.append(t)
            rss = max(rss, r)
        fresh()
        size = model.stat().st_size
        if wrote and not a.keep_models:
            model.unlink()
        rows.append((preset, size, min(cps), first, min(plans), min(warms), min(unplanned), min(noops), rss, first_rss))
        records.append((preset, min(cps), record_cold, record_warm, (bare, bare_rss), (first, first_rss)))
        starts.append((preset, min(passes), min(versions), min(noops)))
        phase_rows.append((preset, best_phases))
        print(
            f"({preset}: first build {first_rep['digests']}, {first_rep['hashed'] / 1e6:.0f} MB read to hash; "
            f"new plan {plan_rep['digests']}; warm {warm_rep['digests']}, {warm_rep['shared'] / 1e6:.0f} MB shared "
            f"(reflink), {warm_rep['copied'] / 1e6:.0f} MB copied, of {warm_rep['bytes'] / 1e6:.0f} MB of tensors)",
            file=sys.stderr,
        )
    shutil.rmtree(cache, ignore_errors=True)
    for scratch in ("report.json", "phases.json", "smoke_ids.json"):
        (work / scratch).unlink(missing_ok=True)
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    print(
        f"target {a.target}; fresh processes; best of {a.repeat} (first build: once; no-op: best of 5); "
        f"load average {load:.1f} at the end"
    )
    print(
        "| model | file | cp | warm build (x cp) | warm, no plan-cache entry (x cp) | new plan (x cp) "
        "| first build (x cp) | no-op | peak RSS (first build) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for preset, size, cp_t, first, plan, warm, unplanned, noop, rss, first_rss in rows:
        print(
            f"| {preset} | {size / 1e6:.0f} MB | {cp_t:.2f} s | {warm:.2f} s ({warm / cp_t:.2f}x) | "
            f"{unplanned:.2f} s ({unplanned / cp_t:.2f}x) | "
            f"{plan:.2f} s ({plan / cp_t:.2f}x) | {first:.2f} s ({first / cp_t:.2f}x) | {noop:.3f} s | "
            f"{rss / 1e6:.0f} MB ({first_rss / 1e6:.0f} MB) |"
        )
    print("goals: warm build <= 2x cp at 1.5b and 3b, <= 4x at 0.5b; no-op <= 0.3 s; peak RSS <= 200 MB at every size")
    print()
    print(
        "the reference forward pass on the smoke prompts (forward_record.json, cached by content), a fresh "
        "process of its own: cold (computed) and warm (its cache entry read and checked), beside the first "
        "build with and without it (every other cache empty):"
    )
    print("| model | record, cold | record, warm | first build without it (x cp) | first build with it (x cp) |")
    print("|---|---|---|---|---|")
    for preset, cp_t, cold, warm, bare, first in records:
        print(
            f"| {preset} | {cold[0]:.2f} s, {cold[1] / 1e6:.0f} MB | {warm[0]:.2f} s, {warm[1] / 1e6:.0f} MB | "
            f"{bare[0]:.2f} s ({bare[0] / cp_t:.1f}x), {bare[1] / 1e6:.0f} MB | "
            f"{first[0]:.2f} s ({first[0] / cp_t:.1f}x), {first[1] / 1e6:.0f} MB |"
        )
    print()
    print("the no-op rebuild beside the interpreter's and the command line's start (best of 5, interleaved):")
    print("| model | python3 -c pass | q25deploy --version | no-op build |")
    print("|---|---|---|---|")
    for preset, pass_t, version_t, noop in starts:
        print(f"| {preset} | {pass_t:.3f} s | {version_t:.3f} s | {noop:.3f} s |")
    print()
    print("where the warm build's time goes (its best run; s from the fork to each phase's end, Q25_PHASE_TIMES):")
    print("| model | " + " | ".join(PHASES) + " |")
    print("|---|" + "---|" * len(PHASES))
    for preset, ph in phase_rows:
        print(f"| {preset} | " + " | ".join(f"{ph[p]:.3f}" if p in ph else "-" for p in PHASES) + " |")


if __name__ == "__main__":
    main()
