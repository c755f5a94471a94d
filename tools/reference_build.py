"""Whether the installed llama-cpp-python (the tests' parity reference) is the pinned release,
built portably: on x86-64 no AVX-512, AMX or AVX-VNNI code, which a -march=native build on one CPU of
CI's emits and another CPU (or the same one, in some of its kernels) crashes on.

    python3 tools/reference_build.py --check        # exit 0: installed, pinned, portable
    python3 tools/reference_build.py --requirement  # the pinned requirement, from pyproject.toml

The library is imported in a child process: a build that crashes at import is not portable.
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import llama_cpp; print(llama_cpp.__version__); print(llama_cpp.llama_print_system_info().decode())"
NATIVE_ONLY = ("AVX512", "AMX", "AVX_VNNI")  # feature families the portable x86-64 build (AVX2) leaves out


def requirement() -> str:
    """The reference extra's pinned llama-cpp-python, as pyproject.toml names it."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'"(llama-cpp-python==[^"]+)"', text)
    if not found:
        raise SystemExit("pyproject.toml pins no llama-cpp-python")
    return found.group(1)


def feature_flags(system_info: str) -> set[str]:
    """The features llama.cpp says it was built with (``AVX2 = 1 | ...``)."""
    return {m.group(1) for m in re.finditer(r"([A-Z0-9_]+) = 1", system_info)}


def native_flags(system_info: str, machine: str) -> list[str]:
    """What makes a build not portable: on x86-64 the AVX-512, AMX and AVX-VNNI features; none elsewhere."""
    if machine not in ("x86_64", "AMD64"):
        return []
    return sorted(f for f in feature_flags(system_info) if f.startswith(NATIVE_ONLY))


def check() -> int:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False)
    if r.returncode != 0:
        print(f"llama-cpp-python: not installed or not loadable (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        return 1
    version, _, info = r.stdout.partition("\n")
    wanted = requirement().split("==", 1)[1]
    if version.strip() != wanted:
        print(f"llama-cpp-python {version.strip()} installed, {wanted} pinned")
        return 1
    native = native_flags(info, platform.machine())
    if native:
        print(f"llama-cpp-python {version.strip()} was built for this CPU ({', '.join(native)}): not portable")
        return 1
    print(f"llama-cpp-python {version.strip()}, portable: {info.strip()}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="exit 0 when the installed build is pinned and portable")
    g.add_argument("--requirement", action="store_true", help="print the pinned requirement")
    args = p.parse_args()
    if args.requirement:
        print(requirement())
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
