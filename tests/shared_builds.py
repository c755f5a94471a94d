"""Builds that a session fixture makes once per test run, not once per pytest-xdist worker: the
C runtime's builds, the test models and their builds, which modules on either worker read
(read-only, like every session fixture's output). The first worker to ask builds under a lock
in the run's common temporary directory (renamed into place, or, for builds that record their
own paths, made in place and marked complete); the others wait for the lock and take it."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def run_dir(tmp_path_factory) -> Path:
    """The temporary directory every worker of this run shares (under xdist each worker's base
    temp is a ``popen-gwN`` inside it; without xdist it is the base temp itself)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """The directory ``make(path)`` writes, made by the first caller of this run."""
    root = run_dir(tmp_path_factory) / "shared-builds"
    root.mkdir(exist_ok=True)
    done = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if make() fails
        if not done.is_dir():
            work = root / f"{name}.partial"
            shutil.rmtree(work, ignore_errors=True)
            make(work)
            work.rename(done)
    return done


def shared_in_place(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """The directory ``make(path)`` fills where it stays (a build records its model's and its
    own paths), made by the first caller of this run; a half-made one is made again."""
    root = run_dir(tmp_path_factory) / "shared-builds"
    root.mkdir(exist_ok=True)
    done, complete = root / name, root / f"{name}.complete"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not complete.exists():
            shutil.rmtree(done, ignore_errors=True)
            done.mkdir()
            make(done)
            complete.touch()
    return done


def runtime(tmp_path_factory, **options) -> Path:
    """``build_runtime``'s output directory for ``options`` (cross, static, sanitize), shared."""
    from q25deploy.packer.runtime import build_runtime

    name = "rt-" + "-".join(f"{k}={v}" for k, v in sorted(options.items())) if options else "rt-host"
    return shared(tmp_path_factory, name, lambda out: build_runtime(out, **options))
