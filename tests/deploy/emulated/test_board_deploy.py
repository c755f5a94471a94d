"""Deploy, smoke --strict and rollback on the emulated Cortex-A53 board (QEMU virt, Debian's
arm64 kernel 6.1, BusyBox 1.35, dropbear 2022.83 or OpenSSH 9.2; see tests/emulated_board/)
with the aarch64 q25tok, as a user would run them, and the regression tests of issue 11's
defects 2, 4, 5 and 9. The board is booted once per session and flavour; tests start from
an empty install path."""

from __future__ import annotations

import json
import time
from pathlib import Path

from board_checks import INSTALL, both_flavours, fresh, q25, resident


@both_flavours
def test_deploy_smoke_strict_and_rollback(board, builds, build_b, q25tok_aarch64, capsys, tmp_path):
    fresh(board)
    a = builds["qemu"]
    t = time.monotonic()
    code, res = q25(capsys, board.q25("deploy", a, "--strict", "--runtime-bin", str(q25tok_aarch64)))
    elapsed = time.monotonic() - t
    assert code == 0, res
    (r,) = res
    assert r["ok"] and r["smoke"]["ok"] and not r["smoke"]["warnings"], r
    checks = {c["name"]: c for c in r["smoke"]["checks"]}
    assert all(c["ok"] for c in checks.values())
    pmap = json.loads((a / "partition_map.json").read_text())
    assert {"q25tok info", "residency", *(f"device tree {x['node']}" for x in pmap["regions"])} <= set(checks)
    assert "partition sha256" not in checks  # hashed by the board as it received them: not twice
    assert r["residency"]["state"] == "resident" and resident(board, a, tmp_path)
    with capsys.disabled():
        print(
            f"\n{board.flavour}: deploy of {r['bytes_sent']:,} bytes in {elapsed:.1f} s "
            f"({r['bytes_sent'] / elapsed / 1e6:.1f} MB/s including verify and smoke test)"
        )
    release_a = r["release"]
    # read back independently: the board's files are the build's
    out = board.sh(f"cd {INSTALL}/current && sha256sum " + " ".join(x["file"] for x in pmap["regions"]))[1]
    assert {ln.split()[1]: ln.split()[0] for ln in out.splitlines()} == {
        x["file"]: x["sha256"] for x in pmap["regions"]
    }
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_a}"
    # one mode, as the layer's recipe and the OTA clients install a release (BusyBox's stat)
    modes = dict(
        reversed(ln.split())
        for ln in board.sh(f"cd {INSTALL}/current/ && stat -c '%a %n' . * partitions/*")[1].splitlines()
    )
    assert modes.pop("q25tok") == modes.pop(".") == modes.pop("partitions") == "755" and set(modes.values()) == {"644"}

    # B's files through OpenSSH's ssh client (logged in ahead, BusyBox's sh reading the command)
    code, res = q25(
        capsys, board.q25("deploy", build_b, "--strict", "--runtime-bin", str(q25tok_aarch64), "--transfer", "openssh")
    )
    assert code == 0 and res[0]["ok"] and res[0]["previous"] == release_a, res
    assert res[0]["files_sent"] >= 2 and not any("ssh" in w for w in res[0]["warnings"]), res
    release_b = res[0]["release"]
    assert res[0]["files_linked"] >= 1  # q25tok was on the board already
    assert resident(board, build_b, tmp_path) and not resident(board, a, tmp_path)

    code, res = q25(capsys, board.q25("rollback", build_b))
    assert code == 0 and res[0]["release"] == release_a
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_a}"
    assert board.sh(f"test -e {INSTALL}/releases/{release_b}", check=False)[0] != 0
    assert resident(board, a, tmp_path)  # rollback loaded A's partitions again
    code, res = q25(capsys, board.q25("status", a))
    assert code == 0 and res[0]["current"] == release_a and res[0]["consistent"]
    assert res[0]["residency"] == "resident"
    code, res = q25(capsys, board.q25("smoke", a, "--strict"))
    assert code == 0 and res[0]["smoke"]["ok"], res
    assert "partition sha256" in {c["name"] for c in res[0]["smoke"]["checks"]}  # standalone: the full check


def test_deploy_to_a_board_whose_root_is_the_initramfs(board, builds, q25tok_aarch64, capsys):
    """Defect 4: BusyBox df skips rootfs, so `df -Pk <install path>` fails there; the free
    space comes from statfs (`stat -f`), and the check still refuses what does not fit."""
    fresh(board)
    board.sh(f"mkdir -p {INSTALL}")
    status, _, err = board.sh(f"df -Pk {INSTALL}", check=False)
    assert status != 0 and "mount point" in err  # the situation of defect 4
    code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0 and res[0]["ok"], res[0]["error"]
    # a small filesystem at the install path: the free-space check still refuses
    fresh(board)
    board.sh(f"mkdir -p {INSTALL} && mount -t tmpfs -o size=2m,mode=0755 q25small {INSTALL}")
    try:
        code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
        assert code == 13 and "bytes free" in res[0]["error"], res
    finally:
        board.sh(f"umount {INSTALL}")


def has_interpreter(elf: Path) -> bool:
    """The ELF file asks for a dynamic loader (a PT_INTERP program header)."""
    import struct

    data = elf.read_bytes()
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))


def test_a_static_runtime_runs_on_a_board_without_glibc(board, builds, q25tok_aarch64, q25tok_aarch64_static, capsys):
    """Defect 9: `runtime build --cross aarch64` gives a glibc-dynamic q25tok (GLIBC_2.34);
    `--static` runs on boards with an older glibc or musl. The board without glibc is a
    chroot holding BusyBox only."""
    from q25deploy.tokenizer.codec import Codec
    from q25deploy.tokenizer.image.reader import read_image_file

    assert not has_interpreter(q25tok_aarch64_static) and has_interpreter(q25tok_aarch64)
    fresh(board)
    code, res = q25(
        capsys, board.q25("deploy", builds["qemu"], "--strict", "--runtime-bin", str(q25tok_aarch64_static))
    )
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], res
    bare = "/tmp/bare"
    board.sh(
        f"rm -rf {bare} && mkdir -p {bare}/bin && cp /bin/busybox {bare}/bin/ && "
        f"cp {INSTALL}/current/q25tok {INSTALL}/current/tokenizer.q25tokrt {bare}/"
    )
    board.put(f"{bare}/q25tok-dynamic", q25tok_aarch64.read_bytes(), "0755")
    text = "Hello, board! 你好 🙂"
    want = Codec(read_image_file(builds["qemu"] / "tokenizer" / "tokenizer.q25tokrt")).encode(text.encode(), False)
    status, out, err = board.sh(f"printf '%s' '{text}' | chroot {bare} /q25tok encode /tokenizer.q25tokrt", check=False)
    assert status == 0 and [int(x) for x in out.split()] == want, err
    status, _, err = board.sh(f"chroot {bare} /q25tok-dynamic info /tokenizer.q25tokrt", check=False)
    assert status != 0  # no dynamic loader in there: the glibc build cannot even start


def test_the_table_says_why_a_smoke_test_failed(board, builds, build_b, q25tok_aarch64, capsys):
    """Defect 5: the table said only `smoke test failed: rolled back to …`; the reason was in
    --json alone. Here the new release comes without --runtime-bin onto an image that has
    no q25tok package."""
    fresh(board)
    code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0, res
    release_a = res[0]["release"]
    argv = [a for a in board.q25("deploy", build_b) if a != "--json"]
    code, table = q25(capsys, argv)
    assert code == 13
    (row,) = [ln for ln in table.splitlines() if ln.startswith(board.host)]
    assert f"rolled back to {release_a}" in row, table
    assert "q25tok info" in row and "/usr/bin/q25tok: not found" in row, table
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_a}"


def test_a_failed_smoke_test_keeps_the_older_rollback_point(board, builds, build_b, q25tok_aarch64, capsys, tmp_path):
    """Defect 2: pruning ran before the smoke test, so a deploy that failed its smoke test and
    rolled back left `previous` none and `releases/<older>` deleted. The board must be back
    exactly where it was."""
    fresh(board)
    a, b = builds["qemu"], build_b
    code, res = q25(capsys, board.q25("deploy", a, "--runtime-bin", str(q25tok_aarch64)))
    release_a = res[0]["release"]
    code, res = q25(capsys, board.q25("deploy", b, "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0 and res[0]["previous"] == release_a
    release_b = res[0]["release"]
    state_before = board.sh(f"cat {INSTALL}/.q25deploy-state.json")[1]
    # a third release whose smoke test fails: no --runtime-bin, and the image has no q25tok
    code, res = q25(capsys, board.q25("deploy", a))
    assert code == 13 and res[0]["rolled_back"] and f"rolled back to {release_b}" in res[0]["error"]
    failed = res[0]["release"]
    assert board.sh(f"cat {INSTALL}/.q25deploy-state.json")[1] == state_before
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_b}"
    assert resident(board, b, tmp_path)  # switching back loaded B's partitions again
    assert sorted(board.sh(f"ls {INSTALL}/releases")[1].split()) == sorted([release_a, release_b])
    assert failed not in (release_a, release_b)
    code, res = q25(capsys, board.q25("status", a))
    assert res[0]["current"] == release_b and res[0]["previous"] == release_a and res[0]["consistent"]
    # the older rollback point still works, and a later good deploy prunes as before
    code, res = q25(capsys, board.q25("rollback", b))
    assert code == 0 and res[0]["release"] == release_a
    code, res = q25(capsys, board.q25("smoke", a))
    assert code == 0 and res[0]["smoke"]["ok"]
