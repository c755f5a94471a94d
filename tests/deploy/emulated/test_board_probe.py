"""The tensor probe on the emulated Cortex-A53 (`q25tok probe` through /dev/mem, Device memory):
`deploy --strict` loads the regions and its smoke test's probe passes; one flipped byte in a
tensor's last block in reserved DDR fails `smoke --strict` and names that tensor. Prints the
probe's time on the board (the figure in bench/probe.md)."""

from __future__ import annotations

import time

from board_checks import INSTALL, fresh, q25

from q25deploy.builddir import BuildDir


def probe_check(res) -> dict:
    return next(c for c in res[0]["smoke"]["checks"] if c["name"] == "tensor probe")


def test_the_probe_passes_then_names_a_flipped_tensor(board, builds, q25tok_aarch64, capsys):
    fresh(board)
    b = BuildDir(builds["qemu"])
    code, res = q25(capsys, board.q25("deploy", b.path, "--strict", "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0 and res[0]["smoke"]["ok"], res
    assert probe_check(res)["ok"], res
    cur = f"{INSTALL}/current"
    ids = " ".join(map(str, b.probe_digests["ids"]))
    tables = f"{cur}/partitions/regions.tab {cur}/partitions/tensors.tab"
    timings = {}
    for mode in ("", "--files "):
        t0 = time.monotonic()
        _, out, _ = board.sh(f"{cur}/q25tok probe {mode}{tables} {ids}", timeout=600)
        timings[mode or "/dev/mem "] = time.monotonic() - t0
        assert len(out.splitlines()) == len(b.probe_digests["tensors"])

    # one byte of the last quantised tensor's last block, flipped in a copy of its partition,
    # which q25tok load puts into the reserved region
    pmap = b.partition_map
    t = next(t for t in reversed(pmap["tensors"]) if t["type"] not in ("F32", "F16"))
    region = pmap["regions"][t["region"]]
    off = t["offset"] + t["bytes"] - 7
    byte = (b.path / region["file"]).read_bytes()[off] ^ 0x40
    board.sh(
        f"rm -rf /tmp/flip && cp -r {cur}/partitions /tmp/flip && "
        f"printf '\\{byte:03o}' | dd of=/tmp/flip/{region['file'].split('/')[-1]} bs=1 seek={off} conv=notrunc 2>/dev/null"
    )
    status, out, _ = board.sh(f"{cur}/q25tok load /tmp/flip/regions.tab", check=False)
    assert status == 6 and "MISMATCH" in out  # loaded, but not the table's sha256
    code, res = q25(capsys, board.q25("smoke", b.path, "--strict"))
    assert code == 13 and probe_check(res)["detail"] == f"1 tensor(s) differ from the build: {t['name']}", res
    status, _, _ = board.sh(f"rm -rf /tmp/flip && {cur}/q25tok load {cur}/partitions/regions.tab", check=False)
    assert status == 0
    with capsys.disabled():
        print(
            f"\n{board.flavour}: q25tok probe of {len(pmap['tensors'])} tensors, {len(b.probe_digests['ids'])} rows: "
            + ", ".join(f"{m.strip()} {s:.2f} s" for m, s in timings.items())
            + " (ssh round trip included)"
        )
