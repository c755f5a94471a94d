#!/usr/bin/env python3
"""Deploy throughput against scp, side by side in one run, to the same OpenSSH sshd on
loopback (started here): the 392 MB partition of the 0.5B-shaped model sent by
q25deploy's transfer path (fabric/paramiko connection, raw channel, AES-GCM), by `scp`,
and by paramiko's SFTP put; and the whole `q25deploy deploy` (upload, board-side sha256
verify, sync, switch, smoke test). Best of N, alternating.

    python3 bench/bench_deploy.py [--repeat 3]      (as root: sshd logs in root)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sshd import SSHServer, keygen  # noqa: E402

from q25deploy.build.runtime import build_runtime  # noqa: E402
from q25deploy.cli import main as cli  # noqa: E402
from q25deploy.deploy.connection import Board, HostSpec  # noqa: E402
from q25deploy.model.demo import vocab_path  # noqa: E402
from q25deploy.model.synthetic import write_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        key = keygen(tmp / "client")
        srv = SSHServer(tmp / "sshd", key)
        kh = srv.known_hosts(tmp / "known_hosts")
        try:
            model = tmp / "qwen25-0.5b.gguf"
            write_model(model, "0.5b", str(vocab_path()))
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                assert cli(["build", "--target", "qemu", "--model", str(model), "--out", str(tmp / "build")]) == 0
            part = tmp / "build" / "partitions" / "region_00.bin"
            size = part.stat().st_size
            dest = tmp / "board"
            dest.mkdir()
            spec = HostSpec("127.0.0.1", "root", srv.port)

            def ours():
                with Board(spec, identity=str(key), known_hosts=str(kh), trust_new_host=False) as b, open(part, "rb") as f:
                    b.upload(f, size, str(dest / "ours.bin"))

            def scp():
                subprocess.run(["scp", "-q", "-P", str(srv.port), "-i", str(key), "-o", f"UserKnownHostsFile={kh}",
                                str(part), f"root@127.0.0.1:{dest / 'scp.bin'}"], check=True)

            def sftp():
                with Board(spec, identity=str(key), known_hosts=str(kh), trust_new_host=False) as b:
                    b.conn.client.open_sftp().put(str(part), str(dest / "sftp.bin"))

            times: dict[str, list[float]] = {"q25deploy transfer": [], "scp": [], "paramiko SFTP put": []}
            for _ in range(a.repeat):
                for name, fn in (("q25deploy transfer", ours), ("scp", scp), ("paramiko SFTP put", sftp)):
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
            runtime = tmp / "rt"
            build_runtime(runtime)
            deploys = []
            for i in range(a.repeat):
                shutil.rmtree(tmp / "root", ignore_errors=True)
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()) as out:
                    code = cli(["deploy", "--target", "qemu", "--host", f"root@127.0.0.1:{srv.port}", "--build",
                                str(tmp / "build"), "--identity", str(key), "--known-hosts", str(kh), "--remote-root",
                                str(tmp / "root"), "--runtime-bin", str(runtime / "q25tok"), "--json"])
                deploys.append(time.perf_counter() - t0)
                assert code == 0, out.getvalue()
            sent = json.loads(out.getvalue())[0]["bytes_sent"]
        finally:
            srv.stop()
    scp_best = min(times["scp"])
    print(f"partition {size / 1e6:.0f} MB to sshd on loopback, best of {a.repeat}:")
    for name, ts in times.items():
        best = min(ts)
        print(f"  {name:<20} {size / best / 1e6:7.0f} MB/s  {best:6.2f} s   {scp_best / best:5.2f}x scp")
    best = min(deploys)
    print(f"  {'deploy (whole)':<20} {sent / best / 1e6:7.0f} MB/s  {best:6.2f} s   {sent / 1e6:.0f} MB sent; upload, "
          "board-side verify, sync, switch, smoke test")
    print("goal: q25deploy transfer >= 0.9x scp")


if __name__ == "__main__":
    main()
