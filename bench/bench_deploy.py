#!/usr/bin/env python3
"""Over-the-network updates against their baselines, side by side in one run, to one OpenSSH
sshd on loopback (started here), with a qemu build of the 0.5B-shaped model (398 MB):

- the raw transfer path (the board receiving with `q25tok receive`, from OpenSSH's `ssh` as
  `--transfer auto` sends a large file, and from the paramiko session; and the shell's `tee`
  into sha256) vs `scp` vs paramiko's SFTP put (one 392 MB partition);
- `deploy --tokenizer-only` of a new image (the board file asks another image alignment)
  vs `scp` of that image alone, smoke test included (goal: at most 2x);
- `deploy --tokenizer-only` when the image is already there;
- a full `deploy` (verify and smoke included) vs `scp` of the same files (goal: at least 0.8x),
  and vs `scp` followed by `sync` (the deploy waits for the board's disk before its switch;
  scp does not wait at all), and the same with `--transfer paramiko`;
- an unchanged redeploy and `status` vs two SSH round trips (`ssh host true` twice; goal: at most);
- `smoke` alone (full, --quick, and --quick without a build: the board's own image).

Then, as root, the same transfers and deploys over a 1 Gbit/s link into a network namespace
of our own (bench/shaped_link.py: the boards' 1000BASE-T), where the wire is the limit
rather than two shared cores. Best of N.

    python3 bench/bench_deploy.py [--repeat 3]      (as root: sshd logs in root)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from shaped_link import shaped_link  # noqa: E402
from sshd import SSHServer, keygen  # noqa: E402

from q25deploy.cli import main as cli  # noqa: E402
from q25deploy.deploy.connection import Board  # noqa: E402
from q25deploy.deploy.hosts import HostSpec  # noqa: E402
from q25deploy.model.demo import vocab_path  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402


class Bench:
    def __init__(self, tmp: Path, repeat: int, address: str = "127.0.0.1", prefix: tuple[str, ...] = ()) -> None:
        self.tmp, self.repeat, self.address = tmp, repeat, address
        tmp.mkdir(parents=True, exist_ok=True)
        self.key = keygen(tmp / "client")
        self.srv = SSHServer(tmp / "sshd", self.key, address=address, prefix=prefix)
        self.kh = self.srv.known_hosts(tmp / "known_hosts")
        self.root = tmp / "root"

    def best(self, fn, *, before=None) -> float:
        times = []
        for _ in range(self.repeat):
            if before:
                before()
            os.sync()  # what earlier runs left dirty is not flushed by this one's sync (nor charged to it)
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    def q25(self, action: str, build: Path, *extra: str) -> dict:
        argv = [
            action,
            "--target",
            "qemu",
            "--host",
            f"root@{self.address}:{self.srv.port}",
            *(["--build", str(build)] if build else []),
            "--identity",
            str(self.key),
            "--known-hosts",
            str(self.kh),
            "--remote-root",
            str(self.root),
            "--json",
            *extra,
        ]
        if action == "deploy":  # this host has no device tree that reserves the regions (the check still runs)
            argv.append("--allow-unreserved")
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = cli(argv)
        assert code == 0, out.getvalue()
        return json.loads(out.getvalue())

    def scp(self, *files: Path) -> None:
        dest = self.tmp / "scp"
        dest.mkdir(exist_ok=True)
        subprocess.run(
            [
                "scp",
                "-q",
                "-P",
                str(self.srv.port),
                "-i",
                str(self.key),
                "-o",
                f"UserKnownHostsFile={self.kh}",
                *map(str, files),
                f"root@{self.address}:{dest}/",
            ],
            check=True,
        )

    def round_trip(self) -> None:
        subprocess.run(
            [
                "ssh",
                "-p",
                str(self.srv.port),
                "-i",
                str(self.key),
                "-o",
                f"UserKnownHostsFile={self.kh}",
                f"root@{self.address}",
                "true",
            ],
            check=True,
        )


def transfer_rows(b: Bench, part: Path, runtime: Path, *, sftp: bool = True) -> list:
    size, spec, dest = part.stat().st_size, HostSpec(b.address, "root", b.srv.port), b.tmp / "raw"
    dest.mkdir(exist_ok=True)

    def ours(receiver: str | None, transfer: str = "auto"):
        def send():
            with (
                Board(
                    spec, identity=str(b.key), known_hosts=str(b.kh), trust_new_host=False, transfer=transfer
                ) as board,
                open(part, "rb") as f,
            ):
                board.receiver = receiver
                board.upload(f, size, str(dest / "ours.bin"))

        return send

    def sftp_put():
        with Board(spec, identity=str(b.key), known_hosts=str(b.kh), trust_new_host=False) as board:
            board.conn.client.open_sftp().put(str(part), str(dest / "sftp.bin"))

    scp, mb = b.best(lambda: b.scp(part)), f"{size / 1e6:.0f} MB"
    rows = [
        (f"raw transfer, q25tok receive via ssh ({mb})", b.best(ours(str(runtime))), "scp", scp),
        (f"raw transfer, q25tok receive via paramiko ({mb})", b.best(ours(str(runtime), "paramiko")), "scp", scp),
        (f"raw transfer, tee into sha256 ({mb})", b.best(ours(None)), "scp", scp),
    ]
    return rows + ([(f"paramiko SFTP put ({mb})", b.best(sftp_put), "scp", scp)] if sftp else [])


def deploy_rows(b: Bench, build: Path, other: Path, runtime: Path, *, brief: bool = False) -> list:
    """The deploy rows; ``brief``: the ones that send (tokenizer-only and the full deploy)."""
    release = [
        build / "tokenizer" / "tokenizer.q25tokrt",
        build / "tokenizer" / "tokenizer_runtime_image_manifest.json",
        build / "partition_map.json",
        *sorted((build / "partitions").iterdir()),
        runtime,
    ]
    rt = ("--runtime-bin", str(runtime))
    fresh = lambda: shutil.rmtree(b.root, ignore_errors=True)  # noqa: E731
    scp = b.best(lambda: b.scp(*release))
    full = b.best(lambda: b.q25("deploy", build, *rt), before=fresh)
    # the deploy waits for the board's disk before it switches (a power cut after it must find
    # the release written); scp returns with the files in the page cache: the same files
    # scp'd and then synced on the "board" (this machine) are the like-for-like figure
    durable = b.best(lambda: (b.scp(*release), os.sync()))
    rows = [
        ("deploy (full release, verify + smoke)", full, "scp of the same files", scp),
        ("deploy (the same runs)", full, "scp + sync (on disk)", durable),
        (
            "deploy --transfer paramiko (full release)",
            b.best(lambda: b.q25("deploy", build, *rt, "--transfer", "paramiko"), before=fresh),
            "scp of the same files",
            scp,
        ),
    ]
    trips = 0.0 if brief else b.best(lambda: (b.round_trip(), b.round_trip()))
    rows += (
        []
        if brief
        else [
            ("unchanged redeploy", b.best(lambda: b.q25("deploy", build, *rt)), "2 SSH round trips", trips),
            ("status", b.best(lambda: b.q25("status", build)), "2 SSH round trips", trips),
            ("smoke (full: partitions hashed on the board)", b.best(lambda: b.q25("smoke", build)), "-", 0.0),
            ("smoke --quick", b.best(lambda: b.q25("smoke", build, "--quick")), "2 SSH round trips", trips),
            (
                "smoke --quick, no build (the board's own image)",
                b.best(lambda: b.q25("smoke", None, "--quick")),
                "2 SSH round trips",
                trips,
            ),
        ]
    )
    # tokenizer-only: a new image each time (alternate between the two alignments)
    state = {"next": other}

    def tok_only():
        b.q25("deploy", state["next"], "--tokenizer-only", *rt)
        state["next"] = build if state["next"] == other else other

    image = other / "tokenizer" / "tokenizer.q25tokrt"
    rows.insert(
        0,
        (
            "deploy --tokenizer-only, new image",
            b.best(tok_only),
            "scp of the image alone",
            b.best(lambda: b.scp(image)),
        ),
    )
    b.q25("deploy", build, "--tokenizer-only", *rt)
    rows.insert(
        1,
        (
            "deploy --tokenizer-only, image already there",
            b.best(lambda: b.q25("deploy", build, "--tokenizer-only", *rt)),
            "-",
            0.0,
        ),
    )
    return rows


def link_rows(tmp: Path, repeat: int, build: Path, other: Path, runtime: Path) -> list:
    """The transfer and the deploys over the shaped 1 Gbit/s link (root only)."""
    if os.geteuid() != 0 or not shutil.which("tc"):
        return [("1 Gbit/s link: skipped (needs root, ip and tc)", 0.0, "-", 0.0)]
    with shaped_link() as (address, prefix):
        b = Bench(tmp, repeat, address, prefix)
        try:
            rows = transfer_rows(b, build / "partitions" / "region_00.bin", runtime, sftp=False)
            rows += deploy_rows(b, build, other, runtime, brief=True)
        finally:
            b.srv.stop()
    return [(f"1G: {name}", *rest) for name, *rest in rows]


def print_table(title: str, rows: list) -> None:
    print(title)
    print(f"  {'operation':<50} {'q25deploy':>9}  {'baseline':<24} {'time':>7}  {'ratio':>6}")
    for name, ours, base_name, base in rows:
        ratio = f"{ours / base:5.2f}x" if base else "     -"
        print(f"  {name:<50} {ours:8.2f}s  {base_name:<24} {base:6.2f}s  {ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-link", action="store_true", help="loopback only (no shaped 1 Gbit/s link)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        b = Bench(tmp / "lo", a.repeat)
        try:
            model = tmp / "qwen25-0.5b.gguf"
            write_model(model, "0.5b", str(vocab_path()))
            board = tmp / "qemu-align.toml"  # the same board asking another image alignment
            board.write_text(
                (ROOT / "targets" / "qemu.toml")
                .read_text()
                .replace("image_alignment = 4096", "image_alignment = 16384")
            )
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli(["build", "--target", "qemu", "--model", str(model), "--out", str(tmp / "build")]) == 0
                assert (
                    cli(
                        [
                            "build",
                            "--target",
                            "qemu",
                            "--target-file",
                            str(board),
                            "--model",
                            str(model),
                            "--out",
                            str(tmp / "other"),
                        ]
                    )
                    == 0
                )
            build_runtime(tmp / "rt")
            runtime = tmp / "rt" / "q25tok"
            rows = transfer_rows(b, tmp / "build" / "partitions" / "region_00.bin", runtime)
            rows += deploy_rows(b, tmp / "build", tmp / "other", runtime)
        finally:
            b.srv.stop()
        link = [] if a.no_link else link_rows(tmp / "link", a.repeat, tmp / "build", tmp / "other", runtime)
    print_table(f"to one OpenSSH sshd on loopback, 0.5B-shaped model, best of {a.repeat}:", rows)
    if link:
        print_table(f"over a 1 Gbit/s link (veth into a network namespace, tc tbf), best of {a.repeat}:", link)
    print(
        "goals: tokenizer-only <= 2x scp of the image; full deploy time <= 1.25x scp of the same files "
        "(>= 0.8x its speed); unchanged redeploy and status <= 2 SSH round trips"
    )


if __name__ == "__main__":
    main()
