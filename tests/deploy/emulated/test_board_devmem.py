"""The emulated board faults where Cortex-A53 silicon faults, on a reserved region mapped
through /dev/mem (Device memory): QEMU >= 10.0 raises SIGBUS on an unaligned access, and the
board's preloaded guard (tests/emulated_board/devmem_guard.c) aborts a glibc mem* call on the
mapping, which silicon faults on and QEMU forgives (DC ZVA in memset, a 64-byte memcpy).
Then `q25tok load` of a partition whose length is not a multiple of 16, under both."""

from __future__ import annotations

import hashlib
import json
import subprocess

import emulated_board as eb
import pytest
from board_checks import INSTALL, fresh
from requirements import need, need_program

PROBE = r"""
/* probe MODE ADDR: map 64 KiB of physical memory at ADDR through /dev/mem and touch it */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
    static uint8_t zeros[65536];
    int fd = open("/dev/mem", O_RDWR | O_SYNC);
    uint8_t *p = fd < 0 ? MAP_FAILED : mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                                            (off_t)strtoull(argv[2], NULL, 0));
    if (argc != 3 || p == MAP_FAILED)
        return 2;
    const char *m = argv[1];
    int r = 0;
    if (!strcmp(m, "aligned")) {            /* what Device memory allows */
        for (int i = 0; i < 65536; i += 8)
            *(volatile uint64_t *)(p + i) = 0;
        for (int i = 0; i < 65536; i += 8)
            r |= *(volatile uint64_t *)(p + i) != 0;
    } else if (!strcmp(m, "unaligned"))      /* silicon and QEMU 10: SIGBUS */
        r = *(volatile uint64_t *)(p + 3) == 42;
    else if (!strcmp(m, "memcpy"))           /* 64 aligned bytes: QEMU forgives it, the guard does not */
        memcpy(p, zeros, 64);
    else if (!strcmp(m, "memset"))           /* DC ZVA on silicon; QEMU does not model that fault */
        memset(p, 0, 65536);
    else if (!strcmp(m, "memcmp"))
        r = memcmp(p, zeros, 64) != 0;
    else
        return 2;
    printf("%s survived\n", m);
    return r;
}
"""


def test_the_board_qemu_faults_on_unaligned_device_memory():
    """QEMU 7.2 forgives an unaligned access to Device memory; the board tests need the
    first version measured to fault (CI installs it from bookworm-backports)."""
    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    version = eb.qemu_version()
    need(
        version[:2] >= eb.FAULTING_QEMU,
        f"qemu-system-aarch64 >= 10.0 (this one is {'.'.join(map(str, version))})",
        "Debian: qemu-system-arm from bookworm-backports",
    )
    assert version[:2] >= eb.FAULTING_QEMU


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    cc = need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
    d = tmp_path_factory.mktemp("probe")
    (d / "probe.c").write_text(PROBE)
    # -fno-builtin: the mem* calls stay calls into glibc, as a program's long or odd copies are
    subprocess.run([cc, "-O1", "-fno-builtin", "-o", str(d / "probe"), str(d / "probe.c")], check=True)
    return (d / "probe").read_bytes()


def test_the_guard_and_qemu_stop_what_silicon_faults_on(board, builds, probe):
    """In the zeros at the end of the last region (nothing but zeros is ever written there)."""
    r = json.loads((builds["qemu"] / "partition_map.json").read_text())["regions"][-1]
    assert r["size"] - r["used"] >= 65536
    addr = r["base"] + r["size"] - 65536
    board.put("/tmp/probe", probe, "0755")

    def run(mode: str) -> tuple[int, str, str]:
        """The probe's exit status as its shell saw it (128 + the signal that ended it)."""
        _, out, err = board.sh(f"/tmp/probe {mode} {addr:#x}; echo status=$?")
        out, _, status = out.rpartition("status=")
        return int(status), out, err

    assert run("aligned") == (0, "aligned survived\n", "")
    for mode in ("memcpy", "memset", "memcmp"):
        status, out, err = run(mode)
        assert status == 128 + 6 and "survived" not in out, (mode, status, out, err)  # SIGABRT
        size = 65536 if mode == "memset" else 64
        assert f"q25-devmem-guard: {mode}(0x" in err and f", {size}) on a /dev/mem mapping (Device memory)" in err
    status, out, err = run("unaligned")
    assert status == 128 + 7 and "survived" not in out, (status, out, err)  # SIGBUS from QEMU >= 10


def test_q25tok_load_of_a_partition_of_odd_length(board, builds, q25tok_aarch64, tmp_path):
    """A partition of 16n+13 bytes in the first region: its last word, and the odd zero tail
    after it, are read-modify-written with aligned words. Under the guard and QEMU 10 the
    load succeeds, and QEMU (outside the guest) reads back the partition then zeros."""
    r = json.loads((builds["qemu"] / "partition_map.json").read_text())["regions"][0]
    data = hashlib.shake_256(b"odd partition").digest(1 << 20) + b"thirteen more"  # 16n + 13 bytes
    assert len(data) % 16 == 13 and (r["size"] - len(data)) % 2 == 1
    table = (
        f"{r['node']} {r['base']:#x} {r['size']:#x} odd.bin {len(data)} {hashlib.sha256(data).hexdigest()}\n"
    ).encode()
    board.sh("rm -rf /tmp/odd && mkdir /tmp/odd")
    board.put("/tmp/odd/q25tok", q25tok_aarch64.read_bytes(), "0755")
    board.put("/tmp/odd/odd.bin", data)
    board.put("/tmp/odd/regions.tab", table)
    try:
        status, out, err = board.sh("/tmp/odd/q25tok load /tmp/odd/regions.tab", check=False)
        assert status == 0 and out.endswith(" loaded\n"), out + err
        ddr = eb.read_physical(board.qemu, r["base"], r["size"], tmp_path / "ddr.bin")
        assert ddr[: len(data)] == data and not ddr[len(data) :].strip(b"\0")
        status, out, err = board.sh("/tmp/odd/q25tok verify /tmp/odd/regions.tab", check=False)
        assert status == 0 and out.endswith(" resident\n"), out + err
    finally:
        fresh(board)  # the region no longer holds the release's partition: the next deploy loads it again
        board.sh(f"rm -rf /tmp/odd; test ! -e {INSTALL}")
