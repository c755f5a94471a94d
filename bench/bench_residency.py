#!/usr/bin/env python3
"""`q25tok load` and `q25tok verify` throughput on the emulated Cortex-A53 board (QEMU TCG),
in MiB/s: this tree's loader with 16-byte (LDP/STP) and 8-byte accesses, and an older
loader (default: the one before the aligned accessors, which used glibc memcpy/memset and
read back with memcmp-free byte loops and SHA-256 straight from the mapping).

One no-map region of 64 MiB at 0x100000000 in the board's device tree; a 48 MiB partition of
random bytes (a multiple of 16, so the old memcpy loader survives QEMU 10's alignment
checks), the rest zeros. Each figure is the best of --runs, timed inside the guest with
BusyBox `time` (the whole command: open, map, copy, msync, read back, hash). The board runs
without the /dev/mem guard (the old loader would abort). TCG is not silicon: these figures
compare the loaders with each other on this machine, nothing more.

    python3 bench/bench_residency.py [--old-rev 212ecf1] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import emulated_board as eb  # noqa: E402
from board_fixtures import TestBoard  # noqa: E402

from q25deploy.board.boardfile import load_board  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402
from q25deploy.resources import data_dir  # noqa: E402

BASE, SIZE, USED = 0x100000000, 64 << 20, 48 << 20
NODE = f"q25-bench@{BASE:x}"
DTSI = f"""/ {{
\treserved-memory {{
\t\t#address-cells = <2>;
\t\t#size-cells = <2>;
\t\tranges;
\t\tbench: {NODE} {{
\t\t\tcompatible = "shared-dma-pool";
\t\t\treg = <0x1 0x0 0x0 {SIZE:#x}>;
\t\t\tno-map;
\t\t}};
\t}};
}};
"""
SOURCES = "recipes/meta-q25/recipes-q25/q25-tokenizer-runtime/files"


def old_loader(rev: str, out: Path) -> Path:
    """q25tok of the tree at ``rev``, built for the board with its own Makefile."""
    src = out / "src"
    src.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, SOURCES], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(src, filter="data")
    files = src / SOURCES
    subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(files),
            "CC=aarch64-linux-gnu-gcc",
            "AR=aarch64-linux-gnu-ar",
            "CFLAGS=-O2 -g -mcpu=cortex-a53",
        ],
        check=True,
    )
    return files / "q25tok"


def seconds(board: TestBoard, command: str) -> float:
    """The guest's own wall-clock time of ``command`` (BusyBox time: real 0m 1.23s)."""
    status, out, err = board.sh(f"time {command} >/tmp/b/out", check=False, timeout=900)
    if status != 0:
        raise SystemExit(f"{command} failed ({status}): {board.sh('cat /tmp/b/out')[1]} {err.strip()[-300:]}")
    m = re.search(r"real\s+(\d+)m\s*([\d.]+)s", err)
    if not m:
        raise SystemExit(f"no timing in {err!r}")
    return int(m[1]) * 60 + float(m[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-rev", default="212ecf1", help="the older loader's commit (default: %(default)s)")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(f"qemu-system-aarch64 {'.'.join(map(str, eb.qemu_version()))} (TCG), host {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = eb.fetch_packages(eb.default_cache_dir())
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "key")], check=True)
        initrd = eb.assemble_initramfs(
            root, work / "initramfs.cpio", eb.InitramfsSpec("dropbear", (work / "key.pub").read_text())
        )
        (work / "bench.dtsi").write_text(DTSI)
        machine = eb.Machine.from_board(load_board(data_dir("targets") / "qemu.toml"))
        dtb = eb.make_dtb(work / "board.dtb", machine, work / "bench.dtsi")
        build_runtime(work / "new", cross="aarch64")
        loaders = {
            "this tree": (work / "new" / "q25tok", {"16-byte": "16", "8-byte": "8"}),
            f"{a.old_rev} (memcpy/memset)": (old_loader(a.old_rev, work / "old"), {"glibc": ""}),
        }
        data = os.urandom(USED)
        table = f"{NODE} {BASE:#x} {SIZE:#x} part.bin {USED} {hashlib.sha256(data).hexdigest()}\n".encode()
        q = eb.boot(
            work / "vm",
            machine,
            eb.Boot(eb.kernel_image(root).absolute(), initrd.absolute(), (), dtb, port=eb.free_port()),
        )
        try:
            secs = eb.wait_for_ssh(q, timeout=180)
            kh = work / "known_hosts"
            kh.write_text(eb.known_hosts_line(q.port) + "\n")
            board = TestBoard("dropbear", q, work / "key", kh, secs, work / "bench.dtsi")
            board.sh("mkdir -p /tmp/b")
            board.put("/tmp/b/part.bin", data)
            board.put("/tmp/b/regions.tab", table)
            mib = USED / (1 << 20)
            print(f"region {SIZE >> 20} MiB, partition {mib:.0f} MiB; best of {a.runs}; MiB/s of the partition")
            print(f"{'loader':32} {'access':8} {'load':>8} {'verify':>8}")
            for name, (exe, widths) in loaders.items():
                board.put("/tmp/b/q25tok", exe.read_bytes(), "0755")
                for width, env in widths.items():
                    pre = f"env Q25TOK_MMIO_WIDTH={env} " if env else ""
                    load = min(seconds(board, f"{pre}/tmp/b/q25tok load /tmp/b/regions.tab") for _ in range(a.runs))
                    verify = min(seconds(board, f"{pre}/tmp/b/q25tok verify /tmp/b/regions.tab") for _ in range(a.runs))
                    print(f"{name:32} {width:8} {mib / load:8.1f} {mib / verify:8.1f}")
        finally:
            q.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
