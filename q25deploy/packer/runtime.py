"""``q25deploy runtime build``: compile the board-side C runtime from the installed sources.

The sources are copied to a temporary build directory (the installed package is never
written) and built with their Makefile, exactly as the BitBake recipe does: ``make`` with
``CC``, ``AR``, ``CFLAGS``, ``LDFLAGS``, then ``make install DESTDIR=...``. File paths are
mapped out of the debug info so the same sources and compiler give the same binaries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ToolError, UsageError
from ..resources import BUILD_PRODUCT_PATTERNS, runtime_sources
from .outputs import OutputDir

SANITIZE_FLAGS = "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"


@dataclass(frozen=True)
class Toolchain:
    cc: str
    ar: str
    cflags: str
    ldflags: str = ""
    debian_package: str = ""
    extra_env: dict = field(default_factory=dict)


def toolchain(cross: str | None, sanitize: bool, static: bool = False) -> Toolchain:
    if static:
        # a static q25tok runs on boards with an older glibc than the cross toolchain's, or musl
        if sanitize:
            raise UsageError("--static and --sanitize do not go together (the sanitizer runtimes are shared)")
        tc = toolchain(cross, sanitize)
        return Toolchain(tc.cc, tc.ar, tc.cflags, f"{tc.ldflags} -static".strip(), tc.debian_package, tc.extra_env)
    if cross is None:
        cflags = SANITIZE_FLAGS if sanitize else "-O2 -g"
        return Toolchain(
            os.environ.get("CC", "cc"), os.environ.get("AR", "ar"), cflags, SANITIZE_FLAGS if sanitize else "", "gcc"
        )
    if cross != "aarch64":
        raise UsageError(f"unknown --cross {cross!r} (supported: aarch64)")
    if sanitize:
        raise UsageError("--sanitize is for host builds (AddressSanitizer does not run under qemu-user)")
    return Toolchain(
        "aarch64-linux-gnu-gcc",
        "aarch64-linux-gnu-ar",
        "-O2 -g -mcpu=cortex-a53",
        debian_package="gcc-aarch64-linux-gnu",
    )


def make_command(tc: Toolchain, build_dir: Path, target: str = "all") -> list[str]:
    cflags = f"{tc.cflags} -ffile-prefix-map={build_dir}=."
    return [
        "make",
        "-C",
        str(build_dir),
        target,
        f"CC={tc.cc}",
        f"AR={tc.ar}",
        f"CFLAGS={cflags}",
        f"LDFLAGS={tc.ldflags}",
    ]


def _run(cmd: list[str], what: str) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ToolError(f"{cmd[0]} not found (needed to {what})") from None
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        detail = lines[-1] if lines else f"exit code {r.returncode}"
        raise ToolError(f"{what} failed: {detail}")


def build_runtime(out: Path, *, cross: str | None = None, sanitize: bool = False, static: bool = False) -> dict:
    """Build q25tok, libq25tok.a and q25tok.h into ``out`` (atomically); returns the manifest.
    ``static`` links q25tok statically (no dynamic loader or libc needed on the board)."""
    tc = toolchain(cross, sanitize, static)
    if shutil.which(tc.cc) is None:
        hint = f" (Debian: apt-get install {tc.debian_package})" if tc.debian_package else ""
        raise ToolError(f"compiler {tc.cc} not found{hint}")
    if shutil.which("make") is None:
        raise ToolError("make not found (Debian: apt-get install make)")
    src = runtime_sources()
    with tempfile.TemporaryDirectory(prefix="q25tok-build-") as tmp:
        build = Path(tmp) / "src"
        shutil.copytree(src, build, ignore=shutil.ignore_patterns(*BUILD_PRODUCT_PATTERNS))
        _run(make_command(tc, build), f"building the runtime with {tc.cc}")
        stage = Path(tmp) / "stage"
        _run(make_command(tc, build, "install") + [f"DESTDIR={stage}", "prefix=/usr"], "installing the runtime")
        info = {
            "toolchain": {"cc": tc.cc, "cflags": tc.cflags, "ldflags": tc.ldflags},
            "target": cross or "host",
            "sanitize": sanitize,
            "static": static,
        }
        with OutputDir(out, "runtime", extra_manifest={"runtime": info}) as o:
            for rel, dest, kind in (
                ("usr/bin/q25tok", "q25tok", "runtime-binary"),
                ("usr/lib/libq25tok.a", "libq25tok.a", "runtime-library"),
                ("usr/include/q25tok.h", "q25tok.h", "runtime-header"),
            ):
                shutil.copy2(stage / rel, o.path(dest))
                o.record(dest, kind)
            manifest = o.manifest()
    return manifest
