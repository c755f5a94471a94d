from __future__ import annotations

import re

import pytest

from q25deploy.board.boardfile import load_board
from q25deploy.errors import BoardFileError
from q25deploy.resources import data_dir

TARGETS = data_dir("targets")
VALID = (TARGETS / "zcu104.toml").read_text()


@pytest.mark.parametrize(
    "name, ddr, budget",
    [
        ("kv260", 4 << 30, 2 << 30),
        ("zcu104", 2 << 30, 1 << 30),
        ("qemu", 4 << 30, 2 << 30),
    ],
)
def test_builtin_boards_load(name, ddr, budget):
    b = load_board(TARGETS / f"{name}.toml")
    assert (b.name, b.ddr_bytes, b.model_budget, b.arch) == (name, ddr, budget, "aarch64")
    assert b.install_path == "/lib/firmware/q25" and b.layout.region_alignment == 2 << 20


def test_kv260_facts():
    b = load_board(TARGETS / "kv260.toml")
    assert [(k.base, k.size) for k in b.banks] == [(0, 0x80000000), (0x800000000, 0x80000000)]
    pmu = next(r for r in b.reserved if r.name == "pmu")
    assert (pmu.base, pmu.size, pmu.in_device_tree) == (0x7FF00000, 0x100000, True)


def test_yocto_machines_one_or_several(tmp_path):
    assert load_board(TARGETS / "zcu104.toml").yocto_machines == ("zynqmp-zcu104-sdt-full", "xilinx-zcu104")
    assert load_board(TARGETS / "kv260.toml").yocto_machine == "k26-smk-kv-sdt"
    assert load_board(TARGETS / "qemu.toml").yocto_machines == ("qemuarm64",)
    no_machine = VALID.replace(next(ln for ln in VALID.splitlines() if ln.startswith("yocto_machine")), "")
    b = load_board(write(tmp_path, no_machine))
    assert (b.yocto_machines, b.yocto_machine) == ((), "")


def test_ssh_become_defaults_to_none(tmp_path):
    assert load_board(TARGETS / "kv260.toml").ssh_become == "none"
    b = load_board(write(tmp_path, VALID.replace('user = "root"', 'user = "petalinux"\nbecome = "sudo"')))
    assert (b.ssh_user, b.ssh_become) == ("petalinux", "sudo")


def test_qemu_has_the_emulated_machine():
    b = load_board(TARGETS / "qemu.toml")
    assert b.banks[0].base == 0x40000000 and b.qemu["machine"] == "virt" and b.qemu["cpu"] == "cortex-a53"


def _machine(text: str, value: str) -> str:
    line = next(ln for ln in text.splitlines() if ln.startswith("yocto_machine"))
    return text.replace(line, f"yocto_machine = {value}")


def write(tmp_path, text):
    p = tmp_path / "board.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t + "\n[extra]\nx = 1\n", "extra: unknown key"),
        (lambda t: t.replace('arch = "aarch64"', 'arch = "aarch64"\ncolor = "red"'), "board.color: unknown key"),
        (lambda t: t.replace("size = 0x80000000", 'size = "2G"'), "memory.banks[0].size: must be a integer"),
        (lambda t: t.replace("size = 0x80000000", "size = 0x80000001"), "multiples of region_alignment"),
        (lambda t: t.replace("region_alignment = 0x200000", "region_alignment = 0x300000"), "power of two"),
        (lambda t: t.replace("max_model_share = 0.5", "max_model_share = 1.5"), "max_model_share"),
        (lambda t: t + '\n[[memory.banks]]\nname = "dup"\nbase = 0x40000000\nsize = 0x200000\n', "overlap"),
        (lambda t: t.replace("base = 0x7ff00000", "base = 0x17ff00000"), "not inside one memory bank"),
        (lambda t: t.replace('path = "/lib/firmware/q25"', 'path = "lib/../x"'), "install.path"),
        (lambda t: t.replace("port = 22", "port = 70000"), "ssh.port"),
        (lambda t: t.replace("port = 22", 'port = 22\nbecome = "su"'), "ssh.become: 'su': use one of none, sudo, doas"),
        (lambda t: t.replace("port = 22", "port = 22\nbecome = true"), "ssh.become: must be a string"),
        (
            lambda t: t.replace("dropbear_receive_window = 0", "dropbear_receive_window = 20971520"),
            "ssh.dropbear_receive_window",
        ),
        (
            lambda t: t.replace("dropbear_receive_window = 0", "dropbear_receive_window = -1"),
            "ssh.dropbear_receive_window",
        ),
        (
            lambda t: t.replace("[install]", "[install]\n").replace('path = "/lib/firmware/q25"', ""),
            "install.path: is required",
        ),
        (lambda t: t + "\n[board\n", "not valid TOML"),
        # what reaches recipes, dts, C and shell must be safe there
        (lambda t: t.replace('name = "zcu104"', "name = \"z\\n${@bb.utils.mkdirhier('/tmp/x')}\""), "board.name"),
        (lambda t: t.replace('name = "zcu104"', 'name = "ZCU 104"'), "board.name"),
        (lambda t: t.replace('name = "ddr-low"', 'name = "low\\"; rm -rf /"'), "memory.banks[0].name"),
        (lambda t: t.replace('path = "/lib/firmware/q25"', 'path = "/lib/q25 ${HOME}"'), "install.path"),
        (
            lambda t: t.replace('path = "/lib/firmware/q25"', 'path = "/lib/q25"\nruntime = "/usr/bin/$(id)"'),
            "install.runtime",
        ),
        (lambda t: re.sub(r'description = ".*"', 'description = "two\\\\nlines"', t, count=1), "board.description"),
        (lambda t: _machine(t, '"ZCU104"'), "board.yocto_machine: 'ZCU104' is not a MACHINE name"),
        (lambda t: _machine(t, '["a", "a:b"]'), "'a:b' is not a MACHINE name"),
        (lambda t: _machine(t, '["a", "a"]'), "names a MACHINE twice"),
        (lambda t: _machine(t, "[1]"), "board.yocto_machine: must be a string or array of strings"),
    ],
)
def test_bad_board_files(tmp_path, change, message):
    with pytest.raises(BoardFileError) as e:
        load_board(write(tmp_path, change(VALID)))
    assert message in str(e.value) and str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_dropbear_receive_window(tmp_path):
    assert load_board(write(tmp_path, VALID)).dropbear_receive_window == 0  # dropbear as built
    board = load_board(
        write(tmp_path, VALID.replace("dropbear_receive_window = 0", "dropbear_receive_window = 1048576"))
    )
    assert board.dropbear_receive_window == 1048576


def test_missing_board_file(tmp_path):
    with pytest.raises(BoardFileError, match="no such board file"):
        load_board(tmp_path / "nope.toml")
