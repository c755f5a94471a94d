"""smoke's tensor probe over a real sshd (q25deploy/deploy/ops/smoke.py, `_check_probe`): with the
regions resident it passes `smoke --strict`; one flipped byte in a tensor's last block in
reserved memory fails the probe and names that tensor; a board without the reservation gets a
warning, a failure under --strict. The stand-in device tree and /dev/mem are
test_deploy_reserved.py's; on the emulated board: tests/deploy/emulated/test_board_probe.py."""

from __future__ import annotations

import json
import subprocess
import sys

from deploy_helpers import board_argv, deploy
from reserved_standin import boot_with
from test_deploy_reserved import board_file

from q25deploy.builddir import BuildDir


def probe_check(res) -> dict:
    return next(c for c in res[0]["smoke"]["checks"] if c["name"] == "tensor probe")


def test_smoke_probes_the_resident_weights(tmp_path, capsys, ssh, models, q25tok):
    srv, root, build = ssh["servers"][1], tmp_path / "board", models["A"]
    bf, dt, mem = board_file(tmp_path)
    boot_with(dt, mem, build)
    here = ("--target-file", str(bf))
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, runtime=q25tok, unreserved=False)
    assert code == 0 and res[0]["smoke"]["ok"] and not res[0]["smoke"]["warnings"], res
    b = BuildDir(build)
    assert probe_check(res) == {
        "name": "tensor probe",
        "ok": True,
        "detail": f"{len(b.probe_digests['tensors'])} tensors as built",
    }

    # a user's `q25deploy smoke` in a fresh process: the probe's check imports no numpy or gguf
    # (they are the build's, for the digests; their import is most of a tokenizer update's smoke)
    argv = board_argv("smoke", ssh, srv, root, "--build", str(build), "--strict", "--json", *here)
    code = (
        "import sys\n"
        "from q25deploy.cli.app import main\n"
        "rc = main(sys.argv[1:])\n"
        "print(rc, sorted(m for m in ('numpy', 'gguf') if m in sys.modules), file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "0 []", r.stderr
    assert probe_check(json.loads(r.stdout))["ok"]

    # the build of another model (same vocabulary): its digests are not the board's weights
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], "--strict", *here, action="smoke")
    assert "tensor probe" not in [c["name"] for c in res[0]["smoke"]["checks"]], res
    assert not any("tensor probe" in w for w in res[0]["smoke"]["warnings"])

    pmap = b.partition_map
    t = next(t for t in reversed(pmap["tensors"]) if t["type"] not in ("F32", "F16"))
    with open(mem, "r+b") as f:  # one byte of its last block, in the reserved region
        f.seek(pmap["regions"][t["region"]]["base"] + t["offset"] + t["bytes"] - 5)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 0x20]))
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, action="smoke")
    assert code == 13 and not probe_check(res)["ok"]
    assert probe_check(res)["detail"] == f"1 tensor(s) differ from the build: {t['name']}"

    for node in (dt / "reserved-memory").iterdir():  # an image without the reservation
        for f in node.iterdir():
            f.unlink()
        node.rmdir()
    code, res, _ = deploy(capsys, ssh, srv, root, build, *here, action="smoke")
    assert "tensor probe not run: the partitions are not in reserved memory" in res[0]["smoke"]["warnings"]
    code, res, _ = deploy(capsys, ssh, srv, root, build, "--strict", *here, action="smoke")
    assert code == 13 and probe_check(res) == {
        "name": "tensor probe",
        "ok": False,
        "detail": "tensor probe not run: the partitions are not in reserved memory",
    }
