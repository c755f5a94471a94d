"""The layer's dropbear bbappend (q25deploy/packer/dropbear.py): absent by default, present
and oelint-adv clean when the board file sets ``[ssh] dropbear_receive_window``, and what
it makes of OE-core's own /etc/default/dropbear is what OE-core's init script and systemd
unit hand to dropbear, in every series (the files come from the Yocto snapshots)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from dropbear_default import apply_window, oe_dropbear_files, sh_words, systemd_words, window_function
from requirements import need_program
from yocto import SERIES

from q25deploy.cli import main

TARGETS = Path(__file__).resolve().parents[2] / "targets"
BBAPPEND = ("recipes-core", "dropbear", "dropbear_%.bbappend")
WINDOW = 1048576


@pytest.fixture(scope="module")
def window_layer(tmp_path_factory, qwen25_tiny) -> Path:
    d = tmp_path_factory.mktemp("dropbear-layer")
    board = d / "kv260-window.toml"
    board.write_text(
        (TARGETS / "kv260.toml")
        .read_text()
        .replace("dropbear_receive_window = 0", f"dropbear_receive_window = {WINDOW}")
    )
    assert (
        main(
            [
                "build",
                "--target",
                "kv260",
                "--target-file",
                str(board),
                "--model",
                str(qwen25_tiny),
                "--out",
                str(d / "b"),
            ]
        )
        == 0
    )
    return d / "b" / "meta-q25"


def test_off_by_default(builds):
    for target in ("kv260", "zcu104", "qemu"):
        assert not (builds[target] / "meta-q25" / "recipes-core").exists()


def test_the_bbappend_when_asked(window_layer):
    text = window_layer.joinpath(*BBAPPEND).read_text()
    assert "@@" not in text
    # for the board's MACHINEs only, where dropbear becomes a MACHINE package
    for m in ("k26-smk-kv-sdt", "xilinx-k26-kv"):
        assert (
            f"do_install:append:{m}() {{\n    q25_dropbear_receive_window ${{D}}${{sysconfdir}}/default/dropbear "
            f"{WINDOW}\n}}"
        ) in text
        assert f'PACKAGE_ARCH:{m} = "${{MACHINE_ARCH}}"' in text
    assert not re.search(r"^(do_install:append|PACKAGE_ARCH)\b[^:]", text, re.M)


@pytest.mark.parametrize("release", ["scarthgap", "walnascar"])
def test_the_bbappend_is_lint_clean(window_layer, release):
    exe = need_program("oelint-adv", "pip install '.[test]' installs oelint-adv")
    r = subprocess.run(
        [exe, "--quiet", "--release", release, str(window_layer.joinpath(*BBAPPEND))], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


@pytest.mark.parametrize("series", SERIES)
def test_init_script_and_unit_read_the_window(window_layer, series, tmp_path):
    oe = oe_dropbear_files(series)
    default = tmp_path / "dropbear"
    default.write_text(oe["dropbear.default"])
    apply_window(window_function(window_layer.joinpath(*BBAPPEND).read_text()), default, WINDOW)
    # OE-core's "-w" (no root login) stays; sh (the init script) and systemd read the same words
    assert sh_words(default) == systemd_words(default) == ["-w", "-W", str(WINDOW)]
    assert "test ! -r /etc/default/dropbear || . /etc/default/dropbear" in oe["init"]
    assert len(re.findall(r'-p "\$DROPBEAR_PORT" \$DROPBEAR_EXTRA_ARGS$', oe["init"], re.M)) == 2  # start, restart
    unit = oe["dropbear@.service"]
    assert "EnvironmentFile=-/etc/default/dropbear" in unit.splitlines()
    assert re.search(r"^ExecStart=-@SBINDIR@/dropbear .*\$DROPBEAR_EXTRA_ARGS$", unit, re.M)
    # the image's allow-root-login and allow-empty-password edits (OE-core's own sed lines) keep the window
    edits = re.findall(r"sed -i (?:-e )?'([^']*DROPBEAR_EXTRA_ARGS[^']*)'", oe["rootfs-postcommands"])
    assert len(edits) == 2, edits
    for e in edits:
        subprocess.run(["sed", "-i", e, str(default)], check=True)
    assert sh_words(default) == systemd_words(default) == ["-W", str(WINDOW), "-B"]


def test_an_earlier_window_is_replaced(window_layer, tmp_path):
    default = tmp_path / "dropbear"
    default.write_text('DROPBEAR_EXTRA_ARGS="-W 65536 -w"\n')
    apply_window(window_function(window_layer.joinpath(*BBAPPEND).read_text()), default, WINDOW)
    assert sh_words(default) == ["-w", "-W", str(WINDOW)]
