"""One libFuzzer run of a harness over the runtime library, under ASan+UBSan: built with
clang, seeded with a corpus (copied, so the checked-in one never grows), bounded by
``Q25_FUZZ_SECONDS`` (20 by default, what CI runs; docs/runtime.md has a longer run). Fails on a crash or a finding."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

from requirements import need_program

from q25deploy.resources import runtime_library_sources, runtime_sources


def fuzz(
    tmp_path: Path, harness: Path, corpus: Path, *options: str, env: dict | None = None, extra: tuple[str, ...] = ()
) -> None:
    """``extra``: runtime sources beside the library's (the command's, e.g. ota_json.c)."""
    clang = need_program("clang", "Debian: clang (libFuzzer)")
    exe = tmp_path / harness.stem
    subprocess.run(
        [
            clang,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-O1",
            "-fsanitize=fuzzer,address,undefined",
            "-fno-sanitize-recover=all",
            "-I",
            str(runtime_sources()),
            str(harness),
            *map(str, runtime_library_sources()),
            *(str(runtime_sources() / name) for name in extra),
            "-o",
            str(exe),
        ],
        check=True,
    )
    work = tmp_path / "corpus"
    shutil.copytree(corpus, work)
    seconds = int(os.environ.get("Q25_FUZZ_SECONDS", "20"))
    r = subprocess.run(
        [
            str(exe),
            f"-max_total_time={seconds}",
            *rss_limited(options),
            "-timeout=10",
            f"-artifact_prefix={tmp_path}/",
            str(work),
        ],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Done" in r.stderr and not list(tmp_path.glob("crash-*"))


def rss_limited(options: tuple[str, ...], default_mb: int = 2048) -> list[str]:
    """``options`` with libFuzzer's -rss_limit_mb (its default 2048 when not given) raised by
    this process's peak RSS. libFuzzer reads its RSS as ru_maxrss, which the kernel carries
    over from the forking process through exec: after tests that ran a 0.5B model's forward
    pass in this process (GBs), a fuzzer's first input was "out of memory". The limit stays
    what the harness may add."""
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # KiB -> MiB
    limit = default_mb
    rest = []
    for o in options:
        if o.startswith("-rss_limit_mb="):
            limit = int(o.split("=", 1)[1])
        else:
            rest.append(o)
    return [*rest, f"-rss_limit_mb={limit + inherited}"]
