#!/usr/bin/env python3
"""The commands a user types, against the commands they would type instead: each figure is the
wall time of a fresh process (cold Python start and SSH login included), ``q25deploy`` beside
``scp``/``ssh``, run interleaved (baseline, ours, baseline, ours...) so both see the same load.

To one OpenSSH sshd on loopback (tests/sshd.py) with the 0.5B-shaped build for a kv260-like
board (the kv260 board file with this machine's arch, its q25tok path in a directory of ours),
in the board states a user has:

- ``deploy --tokenizer-only`` of a new image (the board file asks another image alignment
  every other run), smoke test included, vs ``scp`` of that image;
- a first full deploy (verify and smoke included) to a board whose image has ``q25tok``, vs
  ``scp`` of the same files; and to one that has none (``--runtime-bin`` sends it first);
- an unchanged redeploy and ``status`` vs ``ssh host true``.

Under each row, the medians of the command's phases (``Q25_PHASE_TIMES``, see
q25deploy/phases.py): start and imports, login, lock and snapshot, transfer, flush, switch,
load, smoke, and the exit. Best and median of N; the load average is printed with them.
``--link`` (root: ip, tc) repeats the table over a 1 Gbit/s link into a network namespace
(bench/shaped_link.py); ``--emulated dropbear|openssh`` to the emulated board
(bench/bench_emulated_deploy.py).

    python3 bench/bench_deploy.py [--repeat 5] [--link]
"""

from __future__ import annotations

import argparse
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
    scp_dir: str
    ssh_extra: tuple[str, ...] = ()

    def ssh_opts(self) -> list[str]:
        return ["-i", str(self.key), "-o", f"UserKnownHostsFile={self.known_hosts}", *self.ssh_extra]


class Runner:
    def __init__(self, tmp: Path, board: Board, target_file: Path, runtime: Path, on_board: Callable) -> None:
        self.tmp, self.board, self.target_file, self.runtime = tmp, board, target_file, runtime
        self.on_board = on_board  # run a shell command on the board (setup, not timed)
        self.phase_file = tmp / "phases.json"
        # as installed: byte-compiled modules (pip compiles them; this environment may say not to
        # write them, and then every run would compile q25deploy's own from source: 0.09 s)
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
        if action == "deploy":  # this "board" has no device tree reserving the regions (the check still runs)
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


def rows_for(r: Runner, build: Path, other: Path, repeat: int) -> list[Row]:
    b = r.board
    runtime_copy = f"cp {r.runtime} {b.runtime_path} && chmod 0755 {b.runtime_path}"
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
            if with_q25tok:
                r.on_board(runtime_copy)

        return before

    r.on_board(f"mkdir -p $(dirname {b.runtime_path})")
    fresh(True)("ours")
    r.q25("deploy", build)  # warm-up: the modules byte-compiled, the build's files in the page cache
    rows.append(
        measure(
            Row("deploy, first (the board's image has q25tok)", "scp of the same files"),
            repeat,
            lambda: r.q25("deploy", build),
            lambda: r.scp(*release),
            fresh(True),
        )
    )
    rows.append(
        measure(
            Row("deploy, first (no q25tok: --runtime-bin)", "scp of the same files"),
            repeat,
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


def make_builds(tmp: Path, runtime_path: str) -> tuple[Path, Path, Path]:
    """The 0.5B-shaped model built for a kv260-like board file (this machine's arch, q25tok at
    ``runtime_path``), and again for the same board asking another image alignment."""
    model = tmp / "qwen25-0.5b.gguf"
    py = [sys.executable, "-m"]
    run = lambda *a: subprocess.run([*py, *a], check=True, capture_output=True)  # noqa: E731
    run("q25deploy.model.synthetic", "--preset", "0.5b", "--vocab", str(vocab_path()), str(model))
    text = (ROOT / "targets" / "kv260.toml").read_text()
    text = text.replace('arch = "aarch64"', f'arch = "{os.uname().machine}"')
    text = text.replace(
        '[install]\npath = "/lib/firmware/q25"', f'[install]\npath = "/lib/firmware/q25"\nruntime = "{runtime_path}"'
    )
    board = tmp / "kv260-here.toml"
    board.write_text(text)
    other = tmp / "kv260-here-align.toml"
    other.write_text(text.replace("image_alignment = 4096", "image_alignment = 16384"))
    for target, out in ((board, "build"), (other, "other")):
        run("q25deploy", "build", "--target-file", str(target), "--model", str(model), "--out", str(tmp / out))
    return board, tmp / "build", tmp / "other"


def local_board(tmp: Path, key: Path, kh: Path, address: str, port: int, prefix: tuple[str, ...]) -> Board:
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    return Board(address, port, user, key, kh, str(tmp / "root"), str(tmp / "board-bin" / "q25tok"), str(tmp / "scp"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--link", action="store_true", help="also over a 1 Gbit/s shaped link (root: ip netns, tc)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        key = keygen(tmp / "client")
        build_runtime(tmp / "rt")
        runtime = tmp / "rt" / "q25tok"
        runtime_path = str(tmp / "board-bin" / "q25tok")
        target_file, build, other = make_builds(tmp, runtime_path)
        on_board = lambda cmd: subprocess.run(["sh", "-c", cmd], check=True)  # noqa: E731
        tables = []
        places = [("lo", "127.0.0.1", ())]
        for tag, address, _ in places:
            srv = SSHServer(tmp / f"sshd-{tag}", key, address=address)
            try:
                board = local_board(tmp, key, srv.known_hosts(tmp / "known_hosts"), address, srv.port, ())
                print(load_line(), "(before)", flush=True)
                rows = rows_for(Runner(tmp, board, target_file, runtime, on_board), build, other, a.repeat)
                tables.append(
                    (
                        f"to one OpenSSH sshd on loopback, 0.5B-shaped kv260 build, fresh processes, N={a.repeat}",
                        rows,
                        load_line(),
                    )
                )
            finally:
                srv.stop()
        if a.link:
            if os.geteuid() != 0 or not shutil.which("tc"):
                print("1 Gbit/s link skipped (needs root, ip and tc)")
            else:
                with shaped_link() as (address, prefix):
                    srv = SSHServer(tmp / "sshd-link", key, address=address, prefix=prefix)
                    try:
                        board = local_board(
                            tmp, key, srv.known_hosts(tmp / "known_hosts-link"), address, srv.port, prefix
                        )
                        rows = rows_for(Runner(tmp, board, target_file, runtime, on_board), build, other, a.repeat)
                        tables.append(
                            (f"over a 1 Gbit/s link (veth into a netns, tc tbf), N={a.repeat}", rows, load_line())
                        )
                    finally:
                        srv.stop()
    for title, rows, load in tables:
        print_table(title, rows)
        print(f"  {load} (after)")
    print(
        "goals: tokenizer-only <= 1.5x scp; full deploy >= 0.9x scp's speed (<= 1.11x its time); status <= 1.1x ssh host true"
    )


if __name__ == "__main__":
    main()
