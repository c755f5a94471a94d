"""The forward pass on the emulated Cortex-A53 (`q25tok generate` from the reserved regions
through /dev/mem, Device memory, under the board's glibc-mem* guard): `deploy --strict` of the
tiny model runs it in its smoke test, from the files it sent beside the load that puts them in
DDR and reads them back, and agrees with the build's record; a byte flipped in DDR
(the scale of a block in the middle of a layer-1 tensor, where the tensor probe does not read)
makes `smoke` fail and name layer 1. Prints the forward pass's time on the board."""

from __future__ import annotations

import time

from board_checks import INSTALL, fresh, q25
from quant_blocks import SCALE_HIGH_BYTE, flipped, middle_scale

from q25deploy.builddir import BuildDir


def checks(res) -> dict[str, dict]:
    return {c["name"]: c for c in res[0]["smoke"]["checks"]}


def test_deploy_runs_the_forward_pass_from_ddr_and_a_flipped_byte_names_its_layer(
    board, builds, q25tok_aarch64, capsys
):
    fresh(board)
    b = BuildDir(builds["qemu"])
    record = b.forward_record
    t0 = time.monotonic()
    code, res = q25(
        capsys, board.q25("deploy", b.path, "--strict", "--forward", "all", "--runtime-bin", str(q25tok_aarch64))
    )
    took = time.monotonic() - t0
    assert code == 0 and res[0]["smoke"]["ok"] and not res[0]["smoke"]["warnings"], res
    forward = [c for n, c in checks(res).items() if n.startswith("forward prompt ")]
    assert len(forward) == len(record["prompts"]) and all(
        c["ok"] and "which the reserved regions hold (loaded beside it, each read back)" in c["detail"] for c in forward
    ), res
    # the same deploy again: root's state records the pass, so it is not run again (deploy/state/forward_known.py)
    release = res[0]["release"]
    code, res = q25(
        capsys, board.q25("deploy", b.path, "--strict", "--forward", "all", "--runtime-bin", str(q25tok_aarch64))
    )
    assert code == 0 and [n for n in checks(res) if n.startswith("forward")] == ["forward pass"], res
    assert f"passed it at release {release} ({len(record['prompts'])} prompts;" in checks(res)["forward pass"]["detail"]

    # one byte of DDR: the scale's high byte of a middle block of a layer-1 tensor, in a copy of
    # its partition that q25tok load puts into the reserved region (the release is untouched)
    pmap = b.partition_map
    t = next(t for t in pmap["tensors"] if t["name"].startswith("blk.1.") and t["type"] in SCALE_HIGH_BYTE)
    off = t["offset"] + middle_scale(t)
    region = pmap["regions"][t["region"]]
    byte = (b.path / region["file"]).read_bytes()[off]
    byte = flipped(byte)
    cur = f"{INSTALL}/current"
    board.sh(
        f"rm -rf /tmp/flip && cp -r {cur}/partitions /tmp/flip && "
        f"printf '\\{byte:03o}' | dd of=/tmp/flip/{region['file'].split('/')[-1]} bs=1 seek={off} conv=notrunc 2>/dev/null"
    )
    status, out, _ = board.sh(f"{cur}/q25tok load /tmp/flip/regions.tab", check=False)
    assert status == 6 and "MISMATCH" in out  # loaded, but not the table's sha256
    code, res = q25(capsys, board.q25("smoke", b.path, "--forward", "all"))
    assert code == 13, res
    c = checks(res)
    assert c["tensor probe"]["ok"], c  # the probe reads first and last blocks: not this one
    assert not c["forward prompt 0"]["ok"] and c["forward prompt 0"]["detail"].startswith(
        "step 0: layer 1 (blk.1.*): "
    ), (t["name"], c)
    status, _, _ = board.sh(f"rm -rf /tmp/flip && {cur}/q25tok load {cur}/partitions/regions.tab", check=False)
    assert status == 0
    t0 = time.monotonic()
    _, out, _ = board.sh(
        f"{cur}/q25tok generate --dump-layers {cur}/partitions/regions.tab {cur}/partitions/tensors.tab "
        + " ".join(map(str, record["prompts"][0]["ids"])),
        timeout=600,
    )
    one = time.monotonic() - t0
    with capsys.disabled():
        print(
            f"\n{board.flavour}: deploy --strict of the tiny model {took:.1f} s; q25tok generate of one prompt "
            f"({len(record['prompts'][0]['ids'])} ids, {record['steps']} steps) from DDR {one:.2f} s"
        )
