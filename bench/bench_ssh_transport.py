#!/usr/bin/env python3
"""SSH upload throughput from paramiko (q25deploy's client) to the emulated Cortex-A53 board
(tests/emulated_board.py: QEMU TCG, Debian's dropbear 2022.83 or OpenSSH 9.2), side by side
with OpenSSH's client on the same boot (`ssh board 'cat > /dev/null' < file`; `scp` where the
board has SFTP: OpenSSH). One boot per server setting (dropbear per -W receive window,
OpenSSH); per boot: every cipher + MAC pairing both sides share (paramiko has no
chacha20-poly1305, Debian's dropbear no AES-GCM); the best pairing over 1, 2, 4 channels of
one connection (each channel has its own server window) and over 2 connections;
q25deploy's `ParamikoSession.upload`; a download (`head -c N /dev/zero`: the client's window).
Rows run round-robin (the host is shared), the best of --repeat rounds counts; MB/s is
10^6 bytes per second of wall time, payload into `cat > /dev/null`.

    python3 bench/bench_ssh_transport.py [--mb 16] [--repeat 3] [--windows 24576,1048576]
                                         [--flavours dropbear,openssh] [--smp 2]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paramiko

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import emulated_board as eb  # noqa: E402
from ssh_throughput import client_cpu, connect, cpu_seconds, download, in_parallel, negotiated, upload  # noqa: E402
from sshd import keygen  # noqa: E402

from q25deploy.board.boardfile import load_board  # noqa: E402
from q25deploy.deploy.transport.connection import ParamikoSession  # noqa: E402
from q25deploy.deploy.transport.hosts import HostSpec  # noqa: E402
from q25deploy.resources import data_dir  # noqa: E402

METRICS = ("MB/s", "board CPU ms/MB", "client CPU ms/MB")
# (cipher, MAC) pairings paramiko offers; a board that lacks one is skipped ("n/a")
PAIRS = [
    ("aes128-ctr", "hmac-sha1"),
    ("aes128-ctr", "hmac-sha2-256"),
    ("aes256-ctr", "hmac-sha1"),
    ("aes256-ctr", "hmac-sha2-256"),
    ("aes128-ctr", "hmac-sha2-512"),
    ("aes128-ctr", "hmac-sha2-256-etm@openssh.com"),
    ("aes128-gcm@openssh.com", "-"),
]


class Target:
    """One booted board: where it listens and how to log in."""

    def __init__(self, label: str, qemu: eb.QemuBoard, key: Path, known_hosts: Path) -> None:
        self.label, self.qemu, self.key, self.kh = label, qemu, key, known_hosts

    def transport(self, cipher: str | None = None, mac: str | None = None, **kw) -> paramiko.Transport:
        return connect(self.qemu.port, self.key, self.kh, cipher, mac, **kw)


def openssh_client(tg: Target, argv: list[str], stdin: Path | None = None) -> float:
    base = [
        "-p",
        str(tg.qemu.port),
        "-i",
        str(tg.key),
        "-o",
        f"UserKnownHostsFile={tg.kh}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]
    t0 = time.perf_counter()
    with open(stdin or os.devnull, "rb") as f:
        subprocess.run(argv[:1] + base + argv[1:], stdin=f, check=True, capture_output=True)
    return time.perf_counter() - t0


def boot(tmp: Path, root: Path, machine: eb.Machine, key: Path, flavour: str, window: int | None) -> Target:
    label = f"dropbear -W {window}" if flavour == "dropbear" else flavour
    work = tmp / label.replace(" ", "_")
    args = ("-W", str(window)) if flavour == "dropbear" and window else ()
    spec = eb.InitramfsSpec(flavour, Path(str(key) + ".pub").read_text(), dropbear_args=args)
    initrd = eb.assemble_initramfs(root, work / "initramfs.cpio", spec)
    q = eb.boot(work, kernel=eb.kernel_image(root), initrd=initrd, dtb=None, machine=machine)
    secs = eb.wait_for_ssh(q, timeout=240)
    kh = work / "known_hosts"
    kh.write_text(eb.known_hosts_line(q.port) + "\n")
    print(f"{label}: SSH up {secs:.1f} s after launch", file=sys.stderr)
    return Target(label, q, key, kh)


class Runner:
    """Measurements on one board: every row once per round, round after round (the host is
    shared: interleaving spreads its load over all rows alike), the best round counts."""

    def __init__(self, payload: bytes, payload_file: Path, repeat: int, pairs: list[tuple[str, str]]) -> None:
        self.payload, self.file, self.repeat, self.pairs_ = memoryview(payload), payload_file, repeat, pairs
        self.notes: list[str] = []

    def measure(self, tg: Target, rows: list[tuple[str, object]]) -> dict[str, dict | None]:
        """rows: (name, fn returning seconds for the payload, or None: not available). Per row:
        the best MB/s, and the fewest CPU ms per MB of the board (QEMU's process: what the
        guest's SSH server costs, whatever the host's load) and of the client (this process
        and its children)."""
        out: dict[str, dict | None] = {name: None for name, _ in rows}
        mb = len(self.payload) / 1e6
        for _ in range(self.repeat):
            for name, fn in rows:
                if fn is None:
                    continue
                b0, c0 = cpu_seconds(tg.qemu.pid), client_cpu()
                try:
                    secs = fn()
                except (paramiko.SSHException, subprocess.CalledProcessError, RuntimeError) as e:
                    self.notes.append(f"{tg.label}: {name}: {type(e).__name__}: {str(e)[:80]}")
                    continue
                now = {
                    METRICS[0]: mb / secs,
                    METRICS[1]: (cpu_seconds(tg.qemu.pid) - b0) * 1e3 / mb,
                    METRICS[2]: (client_cpu() - c0) * 1e3 / mb,
                }
                prev = out[name] or now
                out[name] = {k: (max if k == METRICS[0] else min)(prev[k], now[k]) for k in METRICS}
        return out

    def pairs(self, tg: Target, opened: list) -> dict[str, float | None]:
        rows = []
        for cipher, mac in self.pairs_:
            try:
                t = tg.transport(cipher, mac)
            except paramiko.SSHException:  # the board lacks it
                rows.append((f"paramiko {cipher} + {mac}", None))
                continue
            opened.append(t)
            rows.append((f"paramiko {cipher} + {mac}", lambda t=t: upload(t, self.payload)))
        t = tg.transport()  # paramiko's own preference order
        opened.append(t)
        self.notes.append(f"{tg.label}: paramiko's default order negotiates {negotiated(t)}")
        rows.append(("paramiko default order", lambda: upload(t, self.payload)))
        return self.measure(tg, rows)

    def parallel(self, tg: Target, pair: list[str], opened: list) -> dict[str, float | None]:
        t = tg.transport(*pair)
        small = tg.transport(*pair, window=2 << 20)
        opened += [t, small]
        spec = HostSpec("127.0.0.1", "root", tg.qemu.port)
        b = ParamikoSession(spec, identity=str(tg.key), known_hosts=str(tg.kh), trust_new_host=False)
        opened.append(b)
        self.notes.append(f"{tg.label}: q25deploy's connection.py negotiates {negotiated(b.transport)}")
        n = len(self.payload)
        ssh = ["ssh", "root@127.0.0.1", "cat > /dev/null"]
        self.notes.append(f"{tg.label}: best pair {pair[0]} + {pair[1]}")
        rows = [
            ("best pair, 1 channel", lambda: upload(t, self.payload)),
            ("best pair, 2 channels", lambda: upload(t, self.payload, 2)),
            ("best pair, 4 channels", lambda: upload(t, self.payload, 4)),
            ("best pair, 2 connections", lambda: two_connections(tg, pair, self.payload)),
            (
                "q25deploy ParamikoSession.upload (connection.py)",
                lambda: _timed(lambda: b.upload(io.BytesIO(self.payload), n, "/dev/null")),
            ),
            ("download, client window 64 MiB", lambda: download(t, n)),
            ("download, client window 2 MiB", lambda: download(small, n)),
            ("ssh cat (OpenSSH client, its default cipher)", lambda: openssh_client(tg, ssh, self.file)),
            (
                "ssh -c aes128-ctr -m hmac-sha1 cat",
                lambda: openssh_client(tg, ssh[:1] + ["-c", "aes128-ctr", "-m", "hmac-sha1"] + ssh[1:], self.file),
            ),
        ]
        if tg.label == "openssh":  # scp speaks SFTP: dropbear has no SFTP server
            rows.append(("scp", lambda: scp(tg, self.file)))
        return self.measure(tg, rows)

    def board(self, tg: Target) -> dict[str, float | None]:
        opened: list = []
        try:
            rows = self.pairs(tg, opened)
            done = {k: v[METRICS[0]] for k, v in rows.items() if v and k.startswith("paramiko ") and " + " in k}
            pair = max(done, key=done.get).split()[1:4:2]
            rows.update(self.parallel(tg, pair, opened))
            return rows
        finally:
            for o in opened:
                o.close()


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def two_connections(tg: Target, pair: list[str], payload: memoryview) -> float:
    ts = [tg.transport(*pair) for _ in range(2)]
    half = len(payload) // 2
    try:
        return in_parallel([lambda t=t, v=v: upload(t, v) for t, v in zip(ts, (payload[:half], payload[half:]))])
    finally:
        for t in ts:
            t.close()


def scp(tg: Target, path: Path) -> float:  # into the board's RAM root filesystem, overwritten each time
    return _timed(
        lambda: subprocess.run(
            [
                "scp",
                "-q",
                "-P",
                str(tg.qemu.port),
                "-i",
                str(tg.key),
                "-o",
                f"UserKnownHostsFile={tg.kh}",
                "-o",
                "BatchMode=yes",
                str(path),
                "root@127.0.0.1:/tmp/scp.bin",
            ],
            check=True,
            capture_output=True,
        )
    )


def table(results: dict[str, dict[str, dict | None]], metric: str, digits: int) -> str:
    columns = list(results)
    rows = list(dict.fromkeys(r for c in columns for r in results[c]))
    out = [f"| {metric} | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for r in rows:
        cells = [(results[c].get(r) or {}).get(metric) for c in columns]
        out.append(f"| {r} | " + " | ".join("n/a" if v is None else f"{v:.{digits}f}" for v in cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=16, help="payload size in MB (10^6 bytes)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N rounds")
    ap.add_argument("--windows", default="24576,1048576", help="dropbear -W values, one boot each")
    ap.add_argument("--flavours", default="dropbear,openssh")
    ap.add_argument("--smp", type=int, default=2, help="the board's vCPUs")
    ap.add_argument(
        "--pairs", default=",".join(f"{c}+{m}" for c, m in PAIRS), help="cipher+MAC pairings to try (MAC '-' for GCM)"
    )
    args = ap.parse_args()
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # pairings a board lacks fail on purpose
    tmp = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    key = keygen(tmp / "client")
    root = eb.fetch_packages(eb.default_cache_dir())
    machine = eb.Machine.from_board(load_board(data_dir("targets") / "qemu.toml"), smp=args.smp)
    payload = os.urandom(args.mb * 1_000_000)
    (tmp / "payload.bin").write_bytes(payload)
    runner = Runner(payload, tmp / "payload.bin", args.repeat, [tuple(p.split("+", 1)) for p in args.pairs.split(",")])
    settings = [("dropbear", int(w)) for w in args.windows.split(",") if "dropbear" in args.flavours]
    settings += [("openssh", None)] if "openssh" in args.flavours else []
    results: dict[str, dict[str, dict | None]] = {}
    for flavour, window in settings:
        tg = boot(tmp, root, machine, key, flavour, window)
        try:
            results[tg.label] = runner.board(tg)
        finally:
            tg.qemu.stop()
    print(
        f"\n{args.mb} MB payload, best of {args.repeat}, board: {args.smp} vCPU TCG, "
        f"host load average {os.getloadavg()[0]:.1f}\n"
    )
    for metric, digits in zip(METRICS, (1, 0, 0)):
        print(table(results, metric, digits) + "\n")
    print("\n".join(runner.notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
