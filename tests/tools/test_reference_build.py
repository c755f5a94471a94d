"""tools/reference_build.py: what makes the parity reference's build portable, and the one
installed for these tests is (the README's and .ci/run's CMAKE_ARGS)."""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "reference_build.py"
_spec = importlib.util.spec_from_file_location("reference_build", TOOL)
assert _spec and _spec.loader
reference_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_build)

# llama_print_system_info of 0.3.36 built natively on a Sapphire Rapids Xeon, and portably
NATIVE_SPR = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
    "AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
)
PORTABLE = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 |"


def test_a_native_avx512_amx_build_is_not_portable_on_x86_64():
    assert reference_build.native_flags(NATIVE_SPR, "x86_64") == [
        "AMX_INT8",
        "AVX512",
        "AVX512_BF16",
        "AVX512_VBMI",
        "AVX512_VNNI",
        "AVX_VNNI",
    ]
    assert reference_build.native_flags(PORTABLE, "x86_64") == []
    assert reference_build.native_flags("CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 |", "aarch64") == []
    assert reference_build.feature_flags("AVX512 = 0 | AVX2 = 1 |") == {"AVX2"}


def test_the_requirement_is_the_reference_extras_pin():
    out = subprocess.run([sys.executable, str(TOOL), "--requirement"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "llama-cpp-python==0.3.36"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64's build flags")
def test_the_installed_reference_is_portable(llama_reference):
    llama_reference.ensure_started()  # the child reports its system info when it starts
    info = llama_reference.info["system_info"]
    assert "AVX2" in reference_build.feature_flags(info), info
    native = reference_build.native_flags(info, platform.machine())
    assert not native, (
        f"llama-cpp-python was built for this CPU ({', '.join(native)}): reinstall it portably, "
        'CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" pip install --no-cache-dir --force-reinstall llama-cpp-python==0.3.36'
    )
