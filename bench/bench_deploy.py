#!/usr/bin/env python3
"""The commands a user types, against the commands they would type instead: each figure is the
wall time of a fresh process (cold Python start and SSH login included), ``q25deploy`` beside
``scp``/``ssh``, run interleaved (baseline, ours, baseline, ours...) so both see the same load.

To one OpenSSH sshd on loopback (tests/sshd.py) with the 0.5B-shaped build for a kv260-like
board (the kv260 board file with this machine's arch, its q25tok path in a directory of ours, its device tree
and /dev/mem stand-ins that reserve the build's regions: tests/reserved_standin.py), in the
board states a user has:

- ``deploy --tokenizer-only`` of a new image (the board file asks another image alignment
  every other run), smoke test included, vs ``scp`` of that image;
- a first full deploy (verify and smoke included) to a board whose image has ``q25tok``, vs
  ``scp`` of the same files; and to one that has none (``--runtime-bin`` sends it first);
- an unchanged redeploy and ``status`` vs ``ssh host true``.

Under each row, the medians of the command's phases (``Q25_PHASE_TIMES``, see
q25deploy/phases.py): start and imports, login, lock and snapshot, transfer, flush, switch,
load, smoke, and the exit. Best and median of N; the load average is printed with them.
``--link`` (root: ip, tc) repeats the table over a 1 Gbit/s link into a network namespace
(bench/shaped_link.py); bench/bench_emulated_deploy.py runs the same table to the emulated
board.

    python3 bench/bench_deploy.py [--repeat 5] [--link]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from reserved_standin import boot_with, power_cycle, with_standins  # noqa: E402
from shaped_link import shaped_link  # noqa: E402
from sshd import SSHServer, keygen  # noqa: E402

from q25deploy.model.demo import vocab_path  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402

PHASES = ("imports", "login", "lock", "transfer", "flush", "switch", "load", "smoke", "verify", "end")
LABELS = {"imports": "start+imports", "lock": "lock+snapshot", "end": "close", "exit": "exit"}


def q25deploy_command() -> list[str]:
    """``q25deploy`` as the user runs it: the console script beside this interpreter."""
    script = Path(sys.executable).parent / "q25deploy"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "q25deploy"]


@dataclass
class Row:
    name: str
    baseline: str
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Board:
    """Where the commands go: ``host`` ([user@]address:port), the key and known_hosts for it,
    and ``shell`` (argv prefix) that runs a command on the "board" (here, or in its namespace)."""

    address: str
    port: int
    user: str
    key: Path
    known_hosts: Path
    remote_root: str
    runtime_path: str  # the board file's q25tok
    runtime_src: str  # a copy of the board's q25tok on the board (put at runtime_path for "the image has it")
    scp_dir: str
    ssh_extra: tuple[str, ...] = ()

    def ssh_opts(self) -> list[str]:
        return ["-i", str(self.key), "-o", f"UserKnownHostsFile={self.known_hosts}", *self.ssh_extra]


class Runner:
    def __init__(
        self, tmp: Path, board: Board, target_file: Path, runtime: Path, on_board: Callable, memory: Path | None = None
    ) -> None:
        self.tmp, self.board, self.target_file, self.runtime = tmp, board, target_file, runtime
        self.memory = memory  # the stand-in /dev/mem of a device tree that reserves the build's regions
        self.on_board = on_board  # run a shell command on the board (setup, not timed)
        self.phase_file = tmp / "phases.json"
        # as installed: byte-compiled modules (pip compiles them; this environment may say not to
        # write them, and then every run would compile q25deploy's own from source)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.env = {**env, "Q25_PHASE_TIMES": str(self.phase_file), "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}

    def q25(self, action: str, build: Path | None, *extra: str) -> dict[str, float]:
        """One ``q25deploy`` process: its phases as durations (the first from before the spawn)."""
        b = self.board
        argv = [
            *q25deploy_command(),
            action,
            "--target-file",
            str(self.target_file),
            "--host",
            f"{b.user}@{b.address}:{b.port}",
            *(["--build", str(build)] if build else []),
            "--identity",
            str(b.key),
            "--known-hosts",
            str(b.known_hosts),
            "--remote-root",
            b.remote_root,
            *extra,
        ]
        if action == "deploy" and self.memory is None:  # no device tree reserving the regions (the check still runs)
            argv.append("--allow-unreserved")
        self.phase_file.unlink(missing_ok=True)
        t0 = time.monotonic()
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=False)
        t1 = time.monotonic()
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        marks = json.loads(self.phase_file.read_text())
        out, last = {"total": t1 - t0}, t0
        for phase in PHASES:
            if phase in marks:
                out[phase], last = marks[phase] - last, marks[phase]
        out["exit"] = t1 - last
        return out

    def scp(self, *files: Path) -> None:
        b = self.board
        subprocess.run(
            ["scp", "-q", "-P", str(b.port), *b.ssh_opts(), *map(str, files), f"{b.user}@{b.address}:{b.scp_dir}/"],
            check=True,
        )

    def ssh_true(self) -> None:
        b = self.board
        subprocess.run(["ssh", "-p", str(b.port), *b.ssh_opts(), f"{b.user}@{b.address}", "true"], check=True)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def measure(row: Row, repeat: int, ours: Callable[[], dict], base: Callable[[], object], before=None) -> Row:
    """Interleaved: baseline then ours, ``repeat`` times; ``before`` readies the board for each."""
    for _ in range(repeat):
        for which in ("base", "ours"):
            if before:
                before(which)
            os.sync()  # what earlier runs left dirty is not flushed by this one (nor charged to it)
            if which == "base":
                row.base.append(timed(base))
            else:
                phases = ours()
                row.ours.append(phases["total"])
                row.phases.append(phases)
    return row


def rows_for(r: Runner, build: Path, other: Path, repeat: int, full_repeat: int | None = None) -> list[Row]:
    """The table's rows; ``full_repeat``: runs of the full deploys (default ``repeat``)."""
    b = r.board
    runtime_copy = f"cp {b.runtime_src} {b.runtime_path} && chmod 0755 {b.runtime_path}"
    release = [
        build / "tokenizer" / "tokenizer.q25tokrt",
        build / "tokenizer" / "tokenizer_runtime_image_manifest.json",
        build / "partition_map.json",
        *sorted((build / "partitions").iterdir()),
    ]
    rows = []

    def fresh(with_q25tok: bool):
        def before(which: str) -> None:
            r.on_board(f"rm -rf {b.remote_root} {b.scp_dir} {b.runtime_path}; mkdir -p {b.scp_dir}")
            if r.memory is not None:  # a board that booted: its regions hold nothing of ours
                power_cycle(r.memory, build)
            if with_q25tok:
                r.on_board(runtime_copy)

        return before

    r.on_board(f"mkdir -p $(dirname {b.runtime_path})")
    full = repeat if full_repeat is None else full_repeat
    if full:  # the first deploys (0: not measured, where 392 MB take minutes: the emulated board)
        fresh(True)("ours")
        r.q25("deploy", build)  # warm-up: the modules byte-compiled, the build's files in the page cache
        rows.append(
            measure(
                Row("deploy, first (the board's image has q25tok)", "scp of the same files"),
                full,
                lambda: r.q25("deploy", build),
                lambda: r.scp(*release),
                fresh(True),
            )
        )
        rows.append(
            measure(
                Row("deploy, first (no q25tok: --runtime-bin)", "scp of the same files"),
                full,
                lambda: r.q25("deploy", build, "--runtime-bin", str(r.runtime)),
                lambda: r.scp(*release, r.runtime),
                fresh(False),
            )
        )
    # the board's image has q25tok and a release is deployed: tokenizer-only updates, a new image each time
    fresh(True)("ours")
    r.q25("deploy", build)
    state = {"next": other}

    def tok_only() -> dict:
        phases = r.q25("deploy", state["next"], "--tokenizer-only")
        state["next"] = build if state["next"] == other else other
        return phases

    image = other / "tokenizer" / "tokenizer.q25tokrt"
    rows.insert(
        0,
        measure(Row("deploy --tokenizer-only, new image", "scp of the image"), repeat, tok_only, lambda: r.scp(image)),
    )
    r.q25("deploy", build, "--tokenizer-only")
    rows.append(measure(Row("deploy, unchanged", "ssh host true"), repeat, lambda: r.q25("deploy", build), r.ssh_true))
    rows.append(measure(Row("status", "ssh host true"), repeat, lambda: r.q25("status", None), r.ssh_true))
    return rows


def print_table(title: str, rows: list[Row]) -> None:
    print(title)
    print(f"  {'operation':<46} {'q25deploy best/median':>21}  {'baseline':<22} {'best/median':>13}  ratio (best)")
    for row in rows:
        ob, om = min(row.ours), statistics.median(row.ours)
        bb, bm = min(row.base), statistics.median(row.base)
        print(f"  {row.name:<46} {ob:9.2f}s / {om:5.2f}s  {row.baseline:<22} {bb:5.2f}s / {bm:5.2f}s  {ob / bb:5.2f}x")
        names = [p for p in (*PHASES, "exit") if any(p in ph for ph in row.phases)]
        parts = [f"{LABELS.get(p, p)} {statistics.median(ph.get(p, 0.0) for ph in row.phases):.3f}" for p in names]
        print(f"      median phases (s): {', '.join(parts)}")


def load_line() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_builds(tmp: Path, runtime_path: str | None = None) -> tuple[Path, Path, Path]:
    """The 0.5B-shaped model built for the kv260 board file, and again for the same board asking
    another image alignment; with ``runtime_path``, for a kv260-like board file that is this
    machine (its arch, q25tok at ``runtime_path``, a stand-in device tree and memory that reserve
    the build's regions). Returns (board file, build, other build)."""
    model = tmp / "qwen25-0.5b.gguf"
    run = lambda *a: subprocess.run([sys.executable, "-m", *a], check=True, capture_output=True)  # noqa: E731
    if not model.exists():
        run("q25deploy.model.synthetic", "--preset", "0.5b", "--vocab", str(vocab_path()), str(model))
    text, tag = (ROOT / "targets" / "kv260.toml").read_text(), "kv260"
    if runtime_path is not None:
        text = with_standins(text, tmp / "device-tree", tmp / "physmem")
        text = text.replace('arch = "aarch64"', f'arch = "{os.uname().machine}"')
        text = text.replace('path = "/lib/firmware/q25"', f'path = "/lib/firmware/q25"\nruntime = "{runtime_path}"')
        tag = "kv260-here"
    board, other = tmp / f"{tag}.toml", tmp / f"{tag}-align.toml"
    board.write_text(text)
    other.write_text(text.replace("image_alignment = 4096", "image_alignment = 16384"))
    for target, out in ((board, f"build-{tag}"), (other, f"other-{tag}")):
        run("q25deploy", "build", "--target-file", str(target), "--model", str(model), "--out", str(tmp / out))
    if runtime_path is not None:
        boot_with(tmp / "device-tree", tmp / "physmem", tmp / f"build-{tag}")
    return board, tmp / f"build-{tag}", tmp / f"other-{tag}"


def local_board(tmp: Path, key: Path, kh: Path, address: str, port: int, runtime: Path) -> Board:
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    bin_dir, root = tmp / "board-bin", str(tmp / "root")
    return Board(address, port, user, key, kh, root, str(bin_dir / "q25tok"), str(runtime), str(tmp / "scp"))


def run_here(cmd: str) -> None:
    subprocess.run(["sh", "-c", cmd], check=True)


def print_goals() -> None:
    print("goals: tokenizer-only <= 1.5x scp; full deploy >= 0.9x scp's speed (<= 1.11x its time); status <= 1.5x ssh")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--link", action="store_true", help="also over a 1 Gbit/s shaped link (root: ip netns, tc)")
    ap.add_argument("--no-loopback", action="store_true", help="only the shaped link")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        key = keygen(tmp / "client")
        build_runtime(tmp / "rt")
        runtime = tmp / "rt" / "q25tok"
        target_file, build, other = make_builds(tmp, str(tmp / "board-bin" / "q25tok"))
        places = [] if a.no_loopback else [("on loopback", "127.0.0.1", ())]
        if a.link and (os.geteuid() != 0 or not shutil.which("tc")):
            print("1 Gbit/s link skipped (needs root, ip and tc)")
        elif a.link:
            places.append(("over a 1 Gbit/s link (veth into a netns, tc tbf)", "", ()))
        for where, address, _ in places:
            with contextlib.ExitStack() as stack:
                if not address:
                    address, prefix = stack.enter_context(shaped_link())
                else:
                    prefix = ()
                srv = SSHServer(tmp / f"sshd-{address}", key, address=address, prefix=prefix)
                stack.callback(srv.stop)
                kh = srv.known_hosts(tmp / f"known_hosts-{address}")
                board = local_board(tmp, key, kh, address, srv.port, runtime)
                print(load_line(), "(before)", flush=True)
                runner = Runner(tmp, board, target_file, runtime, run_here, memory=tmp / "physmem")
                rows = rows_for(runner, build, other, a.repeat)
                print_table(
                    f"to one OpenSSH sshd {where}, 0.5B-shaped kv260 build, fresh processes, N={a.repeat}", rows
                )
                print(f"  {load_line()} (after)", flush=True)
    print_goals()


if __name__ == "__main__":
    main()
