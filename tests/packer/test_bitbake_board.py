"""The packages BitBake built from the qemu board's layer (conftest.bitbake_packages) on each
series that builds it (scarthgap, wrynose; tests/yocto.py's SERIES_INFO), on the emulated board
with no ``deploy``: their payloads unpacked into the board's root as an image
installs them, the board boots, the packaged boot service loads the model's partitions into
the reserved regions at boot (read back by QEMU, outside the guest), and ``smoke --strict``
and ``status`` pass against the image's own assets with the packaged ``q25tok``.

The emulated board's init is BusyBox's, not systemd: the build's DISTRO has systemd only (its
sysvinit registration cannot be built offline, docs/contributing.md#bitbake), so the board runs what the
packaged unit asks systemd to run, at the same point (``WantedBy=sysinit.target``: before
the SSH server starts), read from the unit in the package. The packages are built for
usrmerge (INIT_MANAGER systemd): the board gets the links a merged-/usr image has for them
(``/lib/firmware``, the dynamic linker under ``/usr/lib``).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from board_checks import q25, resident
from yocto import RECIPES, built_pairs

RUNTIME, ASSETS, REGIONS, _GROUP = RECIPES
QEMU_SERIES = [s for s, b in built_pairs() if b == "qemu"]


def _unpack(debs: Path, root: Path) -> None:
    for pkg in (RUNTIME, ASSETS, REGIONS):
        (deb,) = debs.rglob(f"{pkg}_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)


def _unit_start(root: Path) -> str:
    unit = (root / "usr/lib/systemd/system/q25-regions.service").read_text()
    assert re.search(r"^WantedBy=sysinit\.target$", unit, re.M), unit
    (command,) = re.findall(r"^ExecStart=(.+)$", unit, re.M)
    return command


@pytest.mark.parametrize("series", QEMU_SERIES)
def test_the_board_runs_the_packages_without_a_deploy(series, bitbake_packages, boot_board, builds, capsys, tmp_path):
    build = builds["qemu"]
    root = tmp_path / "root"
    _unpack(bitbake_packages(series, "qemu").debs, root)
    assert (root / "usr/lib/firmware/q25/assets_manifest.json").is_file()
    # the merged-/usr links of the image these packages were built for
    (root / "lib").mkdir()
    (root / "lib/firmware").symlink_to("../usr/lib/firmware")
    (root / "usr/lib/ld-linux-aarch64.so.1").symlink_to("/lib/ld-linux-aarch64.so.1")
    start = _unit_start(root)
    boot_service = f'#!/bin/sh\n# q25-regions.service (WantedBy=sysinit.target)\n[ "$1" = start ] && exec {start}\n'
    board = boot_board(
        "openssh",
        build / "reserved-memory.dtsi",
        trees=(root,),
        extra_files={"etc/init.d/S20q25-regions": boot_service.encode()},
    )
    # the packaged boot service loaded the image's assets at boot, with the packaged q25tok
    assert resident(board, build, tmp_path), "the regions do not hold the packaged partitions after boot"
    _, log, _ = board.sh("ls /lib/firmware/q25/current 2>&1; /usr/sbin/q25-regions status")
    assert "No such file" in log and "region q25-region" in log and "resident" in log, log
    code, res = q25(capsys, board.q25("smoke", build, "--strict"))
    assert code == 0 and res[0]["ok"] and res[0]["release"] == "image", res
    names = {c["name"] for c in res[0]["smoke"]["checks"]}
    assert {"q25tok info", "partition sha256", "residency", "tensor probe"} <= names, names
    assert not res[0]["smoke"]["warnings"], res
    code, res = q25(capsys, board.q25("status", build))
    assert code == 0 and res[0]["current"] is None and res[0]["residency"] == "resident", res
    assert res[0]["image"]["model_sha256"] == json.loads((build / "build.json").read_text())["model"]["sha256"]
    assert res[0]["reserved"] is True, res
