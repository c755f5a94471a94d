"""OpenBLAS pinned before numpy loads (q25deploy/numerics.py): the same kernels on every x86-64
CPU that can run them, so that the forward record is byte-identical across machines; a user's
own choice stands, and a CPU without AVX2 is never asked for kernels it cannot run."""

from __future__ import annotations

import os
import subprocess
import sys

from q25deploy import numerics


def test_kernels_are_asked_only_of_a_cpu_that_has_them(tmp_path, monkeypatch):
    monkeypatch.setattr(numerics, "_machine", lambda: "x86_64")
    for flags, want in (("fpu sse2 avx avx2 fma bmi2", "Haswell"), ("fpu sse2 avx", None)):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        monkeypatch.setattr(numerics, "_cpu_flags", lambda info=info: numerics._read(str(info)))
        env: dict[str, str] = {}
        numerics.pin(env)
        assert env.get("OPENBLAS_CORETYPE") == want and env["OPENBLAS_NUM_THREADS"] == "1"
    env = {"OPENBLAS_CORETYPE": "Zen", "OPENBLAS_NUM_THREADS": "2"}
    numerics.pin(env)
    assert env == {"OPENBLAS_CORETYPE": "Zen", "OPENBLAS_NUM_THREADS": "2"}  # the user's, as set
    monkeypatch.setattr(numerics, "_machine", lambda: "aarch64")
    env = {}
    numerics.pin(env)
    assert "OPENBLAS_CORETYPE" not in env


def test_the_program_runs_with_the_pinned_kernels():
    """numpy's OpenBLAS reports the core it uses: the pinned one, wherever this machine can run it."""
    code = (
        "import ctypes, sys\n"
        "from q25deploy.numerics import pin\n"
        "pin()\n"
        "import numpy\n"
        "lib = next(l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l.lower() and '.so' in l)\n"
        "so = ctypes.CDLL(lib)\n"
        "fn = next(getattr(so, n) for n in ('scipy_openblas_get_corename64_', 'scipy_openblas_get_corename', "
        "'openblas_get_corename64_', 'openblas_get_corename') if hasattr(so, n))\n"
        "fn.restype = ctypes.c_char_p\n"
        "print(fn().decode())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    core = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    flags = numerics._read("/proc/cpuinfo")
    if numerics._machine() == "x86_64" and {"avx2", "fma"} <= flags:
        assert core.strip().lower() == "haswell"
    else:  # its own kernels: still a named core
        assert core.strip()
