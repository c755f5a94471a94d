"""The reserved regions on the emulated board: the kernel honours every region of our
reserved-memory.dtsi, the qemu board file reserves what QEMU loads (defect 8), `q25tok load`
puts the partitions into reserved DDR (read back by QEMU from outside), a boot service
reloads them after a power cycle, and a board booted without the fragment fails
`smoke --strict`."""

from __future__ import annotations

import json
import time

from board_checks import INSTALL, cells, fresh, iomem, q25, resident, system_ram
from requirements import need_program


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


def test_smoke_strict_fails_on_a_board_booted_without_the_fragment(boot_board, builds, q25tok_aarch64, capsys):
    plain = boot_board("dropbear", None)
    regions = json.loads((builds["qemu"] / "partition_map.json").read_text())["regions"]
    assert system_ram(plain) == 4 << 30  # nothing reserved
    assert "q25-region" not in plain.sh("dmesg")[1]
    code, res = q25(capsys, plain.q25("deploy", builds["qemu"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 13 and res[0]["bytes_sent"] == 0 and "does not reserve" in res[0]["error"], res
    code, res = q25(
        capsys, plain.q25("deploy", builds["qemu"], "--allow-unreserved", "--runtime-bin", str(q25tok_aarch64))
    )
    assert code == 0 and res[0]["ok"] and any("--allow-unreserved" in w for w in res[0]["warnings"])
    assert any("predates" in w for w in res[0]["smoke"]["warnings"])
    code, res = q25(capsys, plain.q25("smoke", builds["qemu"], "--strict"))
    assert code == 13 and not res[0]["smoke"]["ok"]
    bad = [c for c in res[0]["smoke"]["checks"] if not c["ok"]]
    names = [f"device tree {r['node']}" for r in regions] + ["residency", "tensor probe", "forward pass"]
    assert [c["name"] for c in bad] == names, bad
    assert "does not reserve the regions" in bad[-3]["detail"] and "not in reserved memory" in bad[-2]["detail"]
    assert bad[-1]["detail"] == "forward pass run from the partition files: they are not in reserved memory"
    forward = [c for c in res[0]["smoke"]["checks"] if c["name"] == "forward prompt 0"]
    assert forward and forward[0]["ok"] and "from the partition files" in forward[0]["detail"], res
    # q25tok load refuses to write where the running tree reserves nothing (kernel memory)
    status, out, _ = plain.sh(f"{INSTALL}/current/q25tok load {INSTALL}/current/partitions/regions.tab", check=False)
    assert status == 6 and "REFUSED the running device tree has no q25-region" in out
    # and a strict deploy onto it fails its smoke test
    plain.sh(f"rm -rf {INSTALL}")
    code, res = q25(
        capsys,
        plain.q25("deploy", builds["qemu"], "--strict", "--allow-unreserved", "--runtime-bin", str(q25tok_aarch64)),
    )
    assert code == 13 and not res[0]["ok"] and "smoke test failed" in res[0]["error"]


def test_the_qemu_board_file_reserves_what_qemu_loads(board):
    """Defect 8: with -kernel/-initrd QEMU puts the initrd at RAM + 128 MiB and the DTB after
    it (hw/arm/boot.c), not at the start of RAM; the board file must reserve where they
    really are, so that no region is planned over them."""
    from q25deploy.board.boardfile import load_board
    from q25deploy.resources import data_dir

    reserved = load_board(data_dir("targets") / "qemu.toml").reserved
    chosen = "/sys/firmware/devicetree/base/chosen"
    initrd = (cells(board, f"{chosen}/linux,initrd-start"), cells(board, f"{chosen}/linux,initrd-end") - 1)
    assert initrd[0] == 0x48000000
    layout = iomem(board)
    kernel = [(s, e) for s, e, name, _ in layout if name in ("Kernel code", "Kernel data")]
    dtb_start = (initrd[1] + 1 + (2 << 20) - 1) & ~((2 << 20) - 1)  # the next 2 MiB boundary
    (dtb,) = [(s, e) for s, e, name, depth in layout if name == "reserved" and s == dtb_start]  # the kernel keeps it
    for start, end in [initrd, dtb, *kernel]:
        assert any(r.base <= start and end < r.base + r.size for r in reserved), (
            f"{start:#x}-{end:#x} is outside the board file's reservations"
        )


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
        assert (
            f"region {r['node']} base {r['base']:#x} size {r['size']:#x} bytes {r['used']} sha256 {r['sha256']} "
            "loaded" in out
        )
        ddr = eb.read_physical(board.qemu, r["base"], r["size"], tmp_path / f"{r['index']}.bin")
        part = (builds["qemu"] / r["file"]).read_bytes()
        assert ddr[: len(part)] == part and not ddr[len(part) :].strip(b"\0")
    with capsys.disabled():
        print(
            f"\n{board.flavour}: q25tok load of {sum(r['used'] for r in pmap['regions']):,} bytes in {load_s:.1f} s "
            "(SSH round trip included)"
        )
    status, out, _ = board.sh(f"{INSTALL}/current/q25tok verify {table}", check=False)
    assert status == 0 and out.count(" resident") == len(pmap["regions"])
    # DDR changes behind our back (a stray write through /dev/mem, BusyBox devmem): verify says so
    r = pmap["regions"][0]
    eb.monitor(board.qemu, f'pmemsave {r["base"]:#x} 1 "{tmp_path / "b"}"')
    byte = (tmp_path / "b").read_bytes()[0]
    board.sh(f"devmem {r['base']:#x} 8 {byte ^ 1:#x}")
    status, out, _ = board.sh(f"{INSTALL}/current/q25tok verify {table}", check=False)
    assert status == 6 and "MISMATCH" in out


def test_after_a_power_cycle_the_boot_service_loads_the_regions_again(
    boot_board, builds, q25tok_aarch64, capsys, tmp_path
):
    """The install path on an ext4 virtio disk (persistent), the layer's boot service
    (q25-regions, as its sysvinit script) in the image: after deploy the regions hold the
    partitions; power off (a new QEMU: DDR starts empty), power on: the service has loaded
    them again before SSH is up, and smoke --strict passes."""
    import emulated_board as eb

    need_program("mkfs.ext4", "Debian: e2fsprogs")
    build = builds["qemu"]
    service = (build / "meta-q25" / "recipes-q25" / "q25-regions" / "files" / "q25-regions").read_bytes()
    disk = eb.make_disk(tmp_path / "disk.img", 64)
    # the image's q25tok (q25-regions RDEPENDS on q25-tokenizer-runtime): the one the service runs
    extra = {"etc/init.d/S20q25-regions": service, "usr/bin/q25tok": q25tok_aarch64.read_bytes()}
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
