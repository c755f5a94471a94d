"""How the runtime touches a reserved region's /dev/mem mapping (Device memory on arm64):
q25_region_read / q25_region_write at every offset and length (host under sanitizers, the
aarch64 build under qemu-aarch64, with 16- and 8-byte accesses), and the aarch64 build's
disassembly: no DC ZVA anywhere, and no call to a mem*/str* function in a function that
holds a mapping. On the emulated board: tests/deploy/emulated/test_board_devmem.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from requirements import need_program
from shared_builds import runtime

from q25deploy.packer.runtime import SANITIZE_FLAGS
from q25deploy.resources import runtime_library_sources, runtime_sources

HERE = Path(__file__).parent
QEMU_LIBS = "/usr/aarch64-linux-gnu"
# the functions that reach a mapping: the accessors, and whoever maps or passes a mapping on
ACCESSORS = {"q25_region_read", "q25_region_write"}
MAPPING_CALLS = ACCESSORS | {"q25_region_map"}
FORBIDDEN_CALL = re.compile(r"^_*(mem|str|bzero|bcmp|explicit_bzero)")


def functions(objdump: str) -> dict[str, list[str]]:
    """``objdump -d`` output as {function: [instruction lines]}."""
    out: dict[str, list[str]] = {}
    current = None
    for line in objdump.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            current = out.setdefault(m[1], [])
        elif current is not None and "\t" in line and ":" in line:  # not objdump's "..." for zero fill
            current.append(line.split(":", 1)[1].strip())
    return out


def callees(instructions: list[str]) -> set[str]:
    """Direct calls and tail calls (``bl``/``b`` to a symbol), without ``@plt`` and ``.constprop`` tails."""
    names = set()
    for ins in instructions:
        m = re.match(r"^(bl|b)\s+[0-9a-f]+ <([^>+]+)>", ins)
        if m:
            names.add(m[2].split("@")[0])
    return names


def holders(funcs: dict[str, list[str]]) -> dict[str, set[str]]:
    """The functions that touch a mapping (the accessors, and every caller of one or of
    q25_region_map), with what each calls."""
    return {
        name: callees(ins)
        for name, ins in funcs.items()
        if name.split(".")[0] in ACCESSORS or callees(ins) & MAPPING_CALLS
    }


@pytest.fixture(scope="session")
def aarch64_runtime(tmp_path_factory) -> Path:
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
    return runtime(tmp_path_factory, cross="aarch64")


def test_no_dc_zva_and_no_string_calls_where_a_mapping_is_touched(aarch64_runtime):
    objdump = need_program("aarch64-linux-gnu-objdump", "Debian: binutils-aarch64-linux-gnu")
    text = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(aarch64_runtime / "q25tok")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert not re.search(r"\bdc\s+zva\b", text), "DC ZVA in q25tok: an alignment fault on Device memory"
    funcs = functions(text)
    found = holders(funcs)
    # the accessors and the loader's functions that hold a mapping, each looked at
    assert ACCESSORS <= set(found), sorted(found)
    assert any("q25_region_map" in calls for calls in found.values()), sorted(found)
    bad = {name: sorted(c for c in calls if FORBIDDEN_CALL.match(c)) for name, calls in found.items()}
    assert not {k: v for k, v in bad.items() if v}, f"glibc string calls next to a /dev/mem mapping: {bad}"


def region_test(tmp_path: Path, cc: str, *flags: str) -> Path:
    src = runtime_sources()
    exe = tmp_path / f"region_test-{Path(cc).name}"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            *flags,
            "-I",
            str(src),
            str(HERE / "region_test.c"),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
        ],
        check=True,
    )
    return exe


@pytest.mark.parametrize("width", ["16", "8"])
def test_region_read_and_write_at_odd_offsets_and_lengths_on_the_host(tmp_path, width):
    exe = region_test(tmp_path, need_program("cc", "Debian: gcc"), *SANITIZE_FLAGS.split())
    r = subprocess.run(
        [exe], capture_output=True, text=True, env={**os.environ, "Q25TOK_MMIO_WIDTH": width}, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.fullmatch(rf"{width}-byte access: \d+ passed, 0 failed\n", r.stdout)


@pytest.mark.parametrize("width", ["16", "8"])
def test_region_read_and_write_at_odd_offsets_and_lengths_on_aarch64(tmp_path, width):
    cc = need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
    need_program("qemu-aarch64", "Debian: qemu-user")
    exe = region_test(tmp_path, cc, "-O2", "-mcpu=cortex-a53")
    r = subprocess.run(
        ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, str(exe)],
        capture_output=True,
        text=True,
        env={**os.environ, "Q25TOK_MMIO_WIDTH": width},
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.fullmatch(rf"{width}-byte access: \d+ passed, 0 failed\n", r.stdout)


def test_the_boot_service_reaches_the_regions_only_through_q25tok():
    """The boot service (q25-regions) loads at boot with `q25tok load`, which the checks above
    hold to aligned accesses; it must not touch /dev/mem itself (BusyBox devmem, dd, cat).
    On the emulated board it runs under the /dev/mem guard (test_board_regions.py)."""
    files = runtime_sources().parent.parent / "q25-regions" / "files"
    script = (files / "q25-regions").read_text()
    code = "\n".join(ln.split("#", 1)[0] for ln in script.splitlines())
    assert '"$Q25TOK" "$1" "$t"' in code and "Q25TOK=/usr/bin/q25tok" in code  # q25tok load|verify TABLE
    assert not re.search(r"/dev/mem|\bdevmem\b|\bdd\b|\bmmap\b", code)
    assert "ExecStart=/usr/sbin/q25-regions start" in (files / "q25-regions.service").read_text()
