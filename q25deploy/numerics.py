"""The host's numerics made the same on every x86-64 workstation: OpenBLAS's kernels pinned.

The reference forward pass (docs/forward.md) is recorded into every build
(``forward_record.json``, in the layer too), and a build must be byte-identical wherever it is
made. numpy's OpenBLAS picks its matrix kernels by CPU when it loads (Haswell's on AVX2
machines, SkylakeX's on AVX-512 ones), and those kernels block their sums differently: the tiny
test model's record came out different on an AVX-512 EPYC than on the AVX2 machines it was
recorded on, and so did the layer's recipe name, which carries a digest of it.

:func:`pin` (called by the program, :func:`q25deploy.cli.run`, and by the tests' conftest,
before numpy loads) asks OpenBLAS for one thread and, on an x86-64 CPU with what the Haswell
kernels need (AVX2 and FMA), for those kernels. A user's own ``OPENBLAS_CORETYPE`` or
``OPENBLAS_NUM_THREADS`` is left as set. Other architectures (an arm64 workstation) keep their
own kernels: their records agree with each other's within ``record_compare``'s tolerances,
not byte for byte with x86-64's.
"""

from __future__ import annotations

import os

KERNELS = "Haswell"  # OpenBLAS's name for its AVX2+FMA kernels
_NEEDS = frozenset({"avx2", "fma"})


def _machine() -> str:
    """The CPU architecture (``os.uname``: importing the ``platform`` module would slow every start)."""
    return os.uname().machine if hasattr(os, "uname") else ""


def _cpu_flags() -> frozenset[str]:
    return _read("/proc/cpuinfo")


def _read(path: str) -> frozenset[str]:
    """The first CPU's flags in a cpuinfo file (only the lines up to them are read)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def pin(environ=os.environ) -> None:
    """Before numpy loads: one OpenBLAS thread (the forward pass's products are small; threads
    spinning on a busy 2-core machine made them ten times slower) and, where the CPU can run
    them, the Haswell kernels."""
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if _machine() == "x86_64" and _NEEDS <= _cpu_flags():
        environ.setdefault("OPENBLAS_CORETYPE", KERNELS)


def kernels(environ=os.environ) -> str:
    """The kernels asked of OpenBLAS ("" for its own choice): part of the record cache's key."""
    return environ.get("OPENBLAS_CORETYPE", "")
