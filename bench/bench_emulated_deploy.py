#!/usr/bin/env python3
"""bench/bench_deploy.py's table to the emulated Cortex-A53 board (tests/emulated_board: QEMU
TCG, Debian's arm64 kernel and BusyBox, dropbear or OpenSSH 9.2), where a login and every board
process cost far more than on loopback: the same fresh ``q25deploy`` processes against ``scp``
(OpenSSH: its SFTP server; dropbear has none: ``ssh board 'cat > FILE'``, what scp would run)
and ``ssh board true``, interleaved. The board runs the kv260 build's release (its device tree
does not reserve the kv260's regions: ``--allow-unreserved``, as on loopback); its image has
``q25tok`` in /usr/bin (a copy in /opt puts it back after the runs that remove it).

    python3 bench/bench_emulated_deploy.py [--repeat 3] [--full-repeat 1] [--flavours dropbear,openssh]

(one full deploy of the 0.5B-shaped release to the board takes a minute or more under TCG)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import emulated_board as eb  # noqa: E402
from bench_deploy import Board, Runner, load_line, make_builds, print_goals, print_table, rows_for  # noqa: E402
from sshd import keygen  # noqa: E402

from q25deploy.board.boardfile import load_board  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402
from q25deploy.resources import data_dir  # noqa: E402


def boot(tmp: Path, flavour: str, key: Path, q25tok: Path, guard: Path) -> tuple[eb.QemuBoard, Path]:
    root = eb.fetch_packages(eb.default_cache_dir())
    smp = os.environ.get("Q25_BOARD_SMP")
    machine = eb.Machine.from_board(load_board(data_dir("targets") / "qemu.toml"), smp=int(smp) if smp else None)
    work = tmp / flavour
    spec = eb.InitramfsSpec(
        flavour,
        Path(str(key) + ".pub").read_text(),
        extra_files={"usr/bin/q25tok": q25tok.read_bytes(), "opt/bin/q25tok": q25tok.read_bytes()},
        preload=eb.guard_files(guard),
    )
    initrd = eb.assemble_initramfs(root, work / "initramfs.cpio", spec)
    dtb = eb.make_dtb(work / "board.dtb", machine, None)
    q = eb.boot(
        work, machine, eb.Boot(eb.kernel_image(root).absolute(), initrd.absolute(), (), dtb, port=eb.free_port())
    )
    secs = eb.wait_for_ssh(q, timeout=float(os.environ.get("Q25_BOARD_BOOT_TIMEOUT", "240")))
    print(f"{flavour}: SSH up {secs:.1f} s after launch", flush=True)
    kh = work / "known_hosts"
    kh.write_text(eb.known_hosts_line(q.port) + "\n")
    return q, kh


def table(
    tmp: Path,
    flavour: str,
    port: int,
    key: Path,
    kh: Path,
    runtime: Path,
    target_file,
    build,
    other,
    repeat,
    full_repeat,
) -> None:
    board = Board("127.0.0.1", port, "root", key, kh, "/data", "/usr/bin/q25tok", "/opt/bin/q25tok", "/data/scp")
    ssh = ["ssh", "-p", str(port), *board.ssh_opts(), "root@127.0.0.1"]
    runner = Runner(tmp, board, target_file, runtime, lambda cmd: subprocess.run([*ssh, cmd], check=True))
    if flavour == "dropbear":  # no SFTP server, no scp on the board: what scp would run

        def cat_files(*files: Path) -> None:
            for f in files:
                with open(f, "rb") as src:
                    subprocess.run([*ssh, f"cat > {board.scp_dir}/{f.name}"], stdin=src, check=True)

        runner.scp = cat_files  # type: ignore[method-assign]
    print(load_line(), "(before)", flush=True)
    rows = rows_for(runner, build, other, repeat, full_repeat)
    print_table(f"to the emulated board ({flavour}, QEMU TCG), N={repeat} (full deploys {full_repeat})", rows)
    print(f"  {load_line()} (after)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full-repeat", type=int, default=1, help="runs of the full deploys (392 MB each; 0: none)")
    ap.add_argument("--flavours", default="dropbear,openssh")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        key = keygen(tmp / "client")
        build_runtime(tmp / "rt", cross="aarch64")
        runtime = tmp / "rt" / "q25tok"
        guard = eb.build_guard(tmp / "q25-devmem-guard.so")
        target_file, build, other = make_builds(tmp)
        for flavour in a.flavours.split(","):
            q, kh = boot(tmp, flavour, key, runtime, guard)
            try:
                table(tmp, flavour, q.port, key, kh, runtime, target_file, build, other, a.repeat, a.full_repeat)
            finally:
                q.stop()
    print_goals()


if __name__ == "__main__":
    main()
