"""On the emulated Cortex-A53 board (QEMU virt, Debian's arm64 kernel 6.1, BusyBox 1.35,
dropbear 2022.83 or OpenSSH 9.2; see emulated_board.py): the kernel honours the regions of
our reserved-memory.dtsi, and deploy / smoke --strict / rollback work with the aarch64
q25tok, as a user would run them. The board is booted once per session and flavour; tests
start from an empty install path."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from requirements import need_program

from q25deploy.cli import main
from q25deploy.model.synthetic import write_model

pytestmark = pytest.mark.board

VOCAB = Path(__file__).parent.parent / "data" / "ggml-vocab-qwen2.gguf"
INSTALL = "/lib/firmware/q25"
# the defects' regression tests run on the dropbear board (the BusyBox board's usual SSH
# server); deploy, smoke, rollback, regions and residency run on both flavours
dropbear_only = pytest.mark.parametrize("board", ["dropbear"], indirect=True)


def q25(capsys, argv: list[str]) -> tuple[int, object]:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip().startswith(("[", "{")) else out)


def fresh(board) -> None:
    board.sh(f"rm -rf {INSTALL}")


@pytest.fixture(scope="module")
def build_b(tmp_path_factory) -> Path:
    """Another model with the same vocabulary and shapes (same regions), other weights."""
    d = tmp_path_factory.mktemp("build-b")
    write_model(d / "b.gguf", "tiny", str(VOCAB), seed=1)
    assert main(["build", "--target", "qemu", "--model", str(d / "b.gguf"), "--out", str(d / "qemu")]) == 0
    return d / "qemu"


def iomem(board) -> list[tuple[int, int, str, int]]:
    """/proc/iomem as (start, end, name, depth)."""
    rows = []
    for line in board.sh("cat /proc/iomem")[1].splitlines():
        span, _, name = line.partition(" : ")
        start, end = span.strip().split("-")
        rows.append((int(start, 16), int(end, 16), name.strip(), len(span) - len(span.lstrip())))
    return rows


def system_ram(board) -> int:
    return sum(end - start + 1 for start, end, name, depth in iomem(board) if name == "System RAM" and depth == 0)


def test_the_kernel_honours_every_planned_region(board, builds):
    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    regions = pmap["regions"]
    assert regions
    dmesg = board.sh("dmesg")[1]
    layout = iomem(board)
    for r in regions:
        base, size, node = r["base"], r["size"], r["node"]
        assert f"OF: reserved mem: initialized node {node}" in dmesg, node
        reg = board.sh(f"od -An -v -tx1 /sys/firmware/devicetree/base/reserved-memory/{node}/reg")[1]
        assert bytes.fromhex("".join(reg.split())) == base.to_bytes(8, "big") + size.to_bytes(8, "big")
        # no-map: not System RAM, listed as reserved at exactly the planned range
        assert (base, base + size - 1, "reserved", 0) in layout
        assert not [x for x in layout if x[2] == "System RAM" and x[0] <= base + size - 1 and base <= x[1]]
    # System RAM shrank by exactly the regions (QEMU's -m 4G bank)
    assert system_ram(board) == (4 << 30) - sum(r["size"] for r in regions)


def resident(board, build: Path, tmp_path: Path) -> bool:
    """Each region's bytes in guest physical memory (read by QEMU, outside the guest) are
    the build's partition followed by zeros."""
    import emulated_board as eb

    for r in json.loads((build / "partition_map.json").read_text())["regions"]:
        ddr = eb.read_physical(board.qemu, r["base"], r["size"], tmp_path / f"ddr-{r['index']}.bin")
        part = (build / r["file"]).read_bytes()
        if ddr[:len(part)] != part or ddr[len(part):].strip(b"\0"):
            return False
    return True


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
        print(f"\n{board.flavour}: deploy of {r['bytes_sent']:,} bytes in {elapsed:.1f} s "
              f"({r['bytes_sent'] / elapsed / 1e6:.1f} MB/s including verify and smoke test)")
    release_a = r["release"]
    # read back independently: the board's files are the build's
    out = board.sh(f"cd {INSTALL}/current && sha256sum " + " ".join(x["file"] for x in pmap["regions"]))[1]
    assert {ln.split()[1]: ln.split()[0] for ln in out.splitlines()} == {x["file"]: x["sha256"] for x in pmap["regions"]}
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_a}"

    code, res = q25(capsys, board.q25("deploy", build_b, "--strict", "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0 and res[0]["ok"] and res[0]["previous"] == release_a, res
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


def test_smoke_strict_fails_on_a_board_booted_without_the_fragment(boot_board, builds, q25tok_aarch64, capsys):
    plain = boot_board("dropbear", None)
    regions = json.loads((builds["qemu"] / "partition_map.json").read_text())["regions"]
    assert system_ram(plain) == 4 << 30  # nothing reserved
    assert "q25-region" not in plain.sh("dmesg")[1]
    code, res = q25(capsys, plain.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0 and res[0]["ok"]
    assert any("predates" in w for w in res[0]["smoke"]["warnings"])
    code, res = q25(capsys, plain.q25("smoke", builds["qemu"], "--strict"))
    assert code == 13 and not res[0]["smoke"]["ok"]
    bad = [c for c in res[0]["smoke"]["checks"] if not c["ok"]]
    assert [c["name"] for c in bad] == [f"device tree {r['node']}" for r in regions] + ["residency"]
    assert "does not reserve the regions" in bad[-1]["detail"]
    # q25tok load refuses to write where the running tree reserves nothing (kernel memory)
    status, out, _ = plain.sh(f"{INSTALL}/current/q25tok load {INSTALL}/current/partitions/regions.tab", check=False)
    assert status == 6 and "REFUSED the running device tree has no q25-region" in out
    # and a strict deploy onto it fails its smoke test
    plain.sh(f"rm -rf {INSTALL}")
    code, res = q25(capsys, plain.q25("deploy", builds["qemu"], "--strict", "--runtime-bin", str(q25tok_aarch64)))
    assert code == 13 and not res[0]["ok"] and "smoke test failed" in res[0]["error"]


@dropbear_only
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
    board.sh(f"mkdir -p {INSTALL} && mount -t tmpfs -o size=2m q25small {INSTALL}")
    try:
        code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
        assert code == 13 and "bytes free" in res[0]["error"], res
    finally:
        board.sh(f"umount {INSTALL}")


def _cells(board, path: str) -> int:
    raw = bytes.fromhex("".join(board.sh(f"od -An -v -tx1 {path}")[1].split()))
    return int.from_bytes(raw, "big")


@dropbear_only
def test_the_qemu_board_file_reserves_what_qemu_loads(board):
    """Defect 8: with -kernel/-initrd QEMU puts the initrd at RAM + 128 MiB and the DTB after
    it (hw/arm/boot.c), not at the start of RAM; the board file must reserve where they
    really are, so that no region is planned over them."""
    from q25deploy.board.boardfile import load_board
    from q25deploy.resources import data_dir

    reserved = load_board(data_dir("targets") / "qemu.toml").reserved
    chosen = "/sys/firmware/devicetree/base/chosen"
    initrd = (_cells(board, f"{chosen}/linux,initrd-start"), _cells(board, f"{chosen}/linux,initrd-end") - 1)
    assert initrd[0] == 0x48000000
    layout = iomem(board)
    kernel = [(s, e) for s, e, name, _ in layout if name in ("Kernel code", "Kernel data")]
    dtb_start = (initrd[1] + 1 + (2 << 20) - 1) & ~((2 << 20) - 1)  # the next 2 MiB boundary
    (dtb,) = [(s, e) for s, e, name, depth in layout if name == "reserved" and s == dtb_start]  # the kernel keeps it
    for start, end in [initrd, dtb, *kernel]:
        assert any(r.base <= start and end < r.base + r.size for r in reserved), \
            f"{start:#x}-{end:#x} is outside the board file's reservations"


def has_interpreter(elf: Path) -> bool:
    """The ELF file asks for a dynamic loader (a PT_INTERP program header)."""
    import struct

    data = elf.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))


@dropbear_only
def test_a_static_runtime_runs_on_a_board_without_glibc(board, builds, q25tok_aarch64, q25tok_aarch64_static,
                                                         capsys):
    """Defect 9: `runtime build --cross aarch64` gives a glibc-dynamic q25tok (GLIBC_2.34);
    `--static` runs on boards with an older glibc or musl. The board without glibc is a
    chroot holding BusyBox only."""
    from q25deploy.tokenizer.codec import Codec
    from q25deploy.tokenizer.image.reader import read_image_file

    assert not has_interpreter(q25tok_aarch64_static) and has_interpreter(q25tok_aarch64)
    fresh(board)
    code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--strict", "--runtime-bin", str(q25tok_aarch64_static)))
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], res
    bare = "/tmp/bare"
    board.sh(f"rm -rf {bare} && mkdir -p {bare}/bin && cp /bin/busybox {bare}/bin/ && "
             f"cp {INSTALL}/current/q25tok {INSTALL}/current/tokenizer.q25tokrt {bare}/")
    board.put(f"{bare}/q25tok-dynamic", q25tok_aarch64.read_bytes(), "0755")
    text = "Hello, board! 你好 🙂"
    want = Codec(read_image_file(builds["qemu"] / "tokenizer" / "tokenizer.q25tokrt")).encode(text.encode(), False)
    status, out, err = board.sh(f"printf '%s' '{text}' | chroot {bare} /q25tok encode /tokenizer.q25tokrt", check=False)
    assert status == 0 and [int(x) for x in out.split()] == want, err
    status, _, err = board.sh(f"chroot {bare} /q25tok-dynamic info /tokenizer.q25tokrt", check=False)
    assert status != 0  # no dynamic loader in there: the glibc build cannot even start


@dropbear_only
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
    assert "q25tok info" in row and "can't execute '/usr/bin/q25tok'" in row, table
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_a}"


@dropbear_only
def test_a_failed_smoke_test_keeps_the_older_rollback_point(board, builds, build_b, q25tok_aarch64, capsys,
                                                            tmp_path):
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


def test_q25tok_load_puts_the_partitions_into_reserved_ddr(board, builds, q25tok_aarch64, capsys, tmp_path):
    """Residency: `q25tok load` writes each partition into its no-map region through
    /dev/mem; QEMU itself (monitor pmemsave, outside the guest) reads the physical range
    back, byte for byte the partition file followed by zeros; `q25tok verify` agrees."""
    import emulated_board as eb

    fresh(board)
    code, res = q25(capsys, board.q25("deploy", builds["qemu"], "--strict", "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0, res
    table = f"{INSTALL}/current/partitions/regions.tab"
    t = time.monotonic()
    status, out, err = board.sh(f"{INSTALL}/current/q25tok load {table}", check=False)
    load_s = time.monotonic() - t
    assert status == 0, out + err
    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    for r in pmap["regions"]:
        assert f"region {r['node']} base {r['base']:#x} size {r['size']:#x} bytes {r['used']} sha256 {r['sha256']} " \
               "loaded" in out
        ddr = eb.read_physical(board.qemu, r["base"], r["size"], tmp_path / f"{r['index']}.bin")
        part = (builds["qemu"] / r["file"]).read_bytes()
        assert ddr[:len(part)] == part and not ddr[len(part):].strip(b"\0")
    with capsys.disabled():
        print(f"\n{board.flavour}: q25tok load of {sum(r['used'] for r in pmap['regions']):,} bytes in {load_s:.1f} s "
              "(SSH round trip included)")
    status, out, _ = board.sh(f"{INSTALL}/current/q25tok verify {table}", check=False)
    assert status == 0 and out.count(" resident") == len(pmap["regions"])
    # DDR changes behind our back (a stray write through /dev/mem, BusyBox devmem): verify says so
    r = pmap["regions"][0]
    eb.monitor(board.qemu, f"pmemsave {r['base']:#x} 1 \"{tmp_path / 'b'}\"")
    byte = (tmp_path / "b").read_bytes()[0]
    board.sh(f"devmem {r['base']:#x} 8 {byte ^ 1:#x}")
    status, out, _ = board.sh(f"{INSTALL}/current/q25tok verify {table}", check=False)
    assert status == 6 and "MISMATCH" in out



def test_after_a_power_cycle_the_boot_service_loads_the_regions_again(boot_board, builds, q25tok_aarch64, capsys,
                                                                       tmp_path):
    """The install path on an ext4 virtio disk (persistent), the layer's boot service
    (q25-regions, as its sysvinit script) in the image: after deploy the regions hold the
    partitions; power off (a new QEMU: DDR starts empty), power on: the service has loaded
    them again before SSH is up, and smoke --strict passes."""
    import emulated_board as eb

    need_program("mkfs.ext4", "Debian: e2fsprogs")
    build = builds["qemu"]
    service = (build / "meta-q25" / "recipes-q25" / "q25-regions" / "files" / "q25-regions").read_bytes()
    disk = eb.make_disk(tmp_path / "disk.img", 64)
    extra = {"etc/init.d/S20q25-regions": service}
    first = boot_board("dropbear", build / "reserved-memory.dtsi", disk=disk, extra_files=extra)
    assert "no region table" in first.qemu.serial()  # the service ran on an empty disk
    code, res = q25(capsys, first.q25("deploy", build, "--strict", "--runtime-bin", str(q25tok_aarch64)))
    assert code == 0 and res[0]["ok"], res[0]["error"]
    assert resident(first, build, tmp_path)
    first.qemu.stop()  # power off (deploy synced everything it wrote)
    second = boot_board("dropbear", build / "reserved-memory.dtsi", disk=disk, extra_files=extra)
    regions = json.loads((build / "partition_map.json").read_text())["regions"]
    serial = second.qemu.serial()
    for r in regions:
        assert f"q25-regions: region {r['node']} base {r['base']:#x}" in serial and "loaded" in serial, serial[-2000:]
    assert resident(second, build, tmp_path)
    code, res = q25(capsys, second.q25("smoke", build, "--strict"))
    assert code == 0 and res[0]["smoke"]["ok"], res[0]["error"]
