"""The qemu plugin's machine: QEMU's argv and the kernel command line (pure), seed stripping,
and the device tree made from QEMU's own dump (real qemu-system-aarch64 and dtc)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from requirements import need_program

from q25deploy.board.boardfile import load_board
from q25deploy.errors import BoardFileError, UsageError
from q25deploy.resources import data_dir
from q25deploy_plugins.qemu.machine import Boot, Files, Machine, kernel_cmdline, make_dtb, qemu_argv, strip_seeds

QEMU_BOARD = load_board(data_dir("targets") / "qemu.toml")
FRAGMENT = """/ {
\treserved-memory {
\t\t#address-cells = <2>;
\t\t#size-cells = <2>;
\t\tranges;
\t\tq25-region0@13fe00000 {
\t\t\treg = <0x1 0x3fe00000 0x0 0x200000>;
\t\t\tno-map;
\t\t};
\t};
};
"""


def test_machine_from_the_board_file():
    m = Machine.from_board(QEMU_BOARD)
    assert (m.machine, m.cpu, m.memory, m.smp, m.qemu) == ("virt", "cortex-a53", "4G", 4, "qemu-system-aarch64")
    assert Machine.from_board(QEMU_BOARD, smp=2, qemu="/opt/qemu/bin/qemu-system-aarch64").smp == 2
    for bad in ({"machine": "virt,dumpdtb=/etc/x"}, {"cpu": "max -bios evil"}, {"memory": "4G,slots=2"}, {"smp": 0}):
        with pytest.raises(BoardFileError, match="qemu\\."):
            Machine.from_board(dataclasses.replace(QEMU_BOARD, qemu={**QEMU_BOARD.qemu, **bad}))


def test_kernel_command_line():
    assert kernel_cmdline(initrd=True, drives=0) == "console=ttyAMA0 panic=-1"
    assert kernel_cmdline(initrd=True, drives=1, extra="quiet") == "console=ttyAMA0 panic=-1 quiet"  # disk for data
    assert kernel_cmdline(initrd=False, drives=1) == "console=ttyAMA0 panic=-1 root=/dev/vda rw"
    assert kernel_cmdline(initrd=False, drives=1, root="/dev/vda ro") == "console=ttyAMA0 panic=-1 root=/dev/vda ro"
    assert kernel_cmdline(initrd=False, drives=1, extra="root=/dev/vdb") == "console=ttyAMA0 panic=-1 root=/dev/vdb"


def test_qemu_argv(tmp_path):
    files = Files.in_dir(tmp_path / "state")
    boot = Boot(Path("/k/Image"), Path("/k/initrd.cpio"), (Path("/disks/a,b.img"),), Path("/s/board.dtb"), port=2345)
    argv = qemu_argv(Machine(smp=2), boot, files)
    assert argv[:2] == ["qemu-system-aarch64", "-machine"]
    joined = " ".join(argv)
    assert "-netdev user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:2345-:22" in joined  # loopback only, no outside
    assert "-device virtio-net-device,netdev=n0" in joined and "-device virtio-blk-device,drive=hd0" in joined
    assert "-drive file=/disks/a,,b.img,format=raw,if=none,id=hd0" in joined  # QEMU's comma escape
    assert f"-pidfile {files.pidfile}" in joined and "-daemonize" in argv and "-no-reboot" in argv
    assert f"-serial file:{files.serial_log}" in joined and f"unix:{files.monitor},server=on,wait=off" in joined
    assert argv[argv.index("-append") + 1] == "console=ttyAMA0 panic=-1"
    assert ["-initrd", "/k/initrd.cpio"] == argv[argv.index("-initrd") : argv.index("-initrd") + 2]
    pci = qemu_argv(Machine(), dataclasses.replace(boot, virtio="pci", drives=(), initrd=None), files)
    assert "virtio-net-pci,netdev=n0,romfile=" in pci and "-initrd" not in pci and "-drive" not in pci
    with pytest.raises(UsageError, match="port"):
        qemu_argv(Machine(), dataclasses.replace(boot, port=70000), files)
    with pytest.raises(UsageError, match="without ','"):
        qemu_argv(Machine(), boot, Files.in_dir(tmp_path / "a,b"))


def test_strip_seeds():
    dts = (
        "/ {\n\tchosen {\n\t\trng-seed = <0x1 0x2>;\n\t\tkaslr-seed = <0x3 0x4>;\n"
        '\t\tstdout-path = "/pl011@9000000";\n\t\trng-seeds-are-not-this = <0x1>;\n\t};\n};\n'
    )
    out = strip_seeds(dts)
    assert "rng-seed =" not in out and "kaslr-seed" not in out
    assert "stdout-path" in out and "rng-seeds-are-not-this" in out


def _dts(dtb: Path) -> str:
    return subprocess.run(
        ["dtc", "-q", "-I", "dtb", "-O", "dts", str(dtb)], capture_output=True, text=True, check=True
    ).stdout


def test_make_dtb_is_reproducible_and_reserves_the_fragment(tmp_path):
    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    need_program("dtc", "Debian: device-tree-compiler")
    (tmp_path / "reserved-memory.dtsi").write_text(FRAGMENT)
    machine = Machine.from_board(QEMU_BOARD, smp=2)
    one = make_dtb(tmp_path / "a" / "board.dtb", machine, tmp_path / "reserved-memory.dtsi")
    two = make_dtb(tmp_path / "b" / "board.dtb", machine, tmp_path / "reserved-memory.dtsi")
    assert one.read_bytes() == two.read_bytes()  # the same inputs, the same bytes
    raw = _dts(tmp_path / "a" / "board.qemu.dtb")
    assert "rng-seed" in raw and "kaslr-seed" in raw  # QEMU's dump has them (random each time)
    dts = _dts(one)
    assert "rng-seed" not in dts and "kaslr-seed" not in dts
    assert "q25-region0@13fe00000" in dts and "no-map" in dts
    assert "reg = <0x00 0x40000000 0x01 0x00>" in dts  # QEMU's memory node: 4 GiB at 0x4000_0000
    assert (tmp_path / "a" / "board.dts").read_text().endswith('/include/ "board.reserved-memory.dtsi"\n')
    plain = make_dtb(tmp_path / "c" / "board.dtb", machine)
    assert "reserved-memory" not in _dts(plain)
