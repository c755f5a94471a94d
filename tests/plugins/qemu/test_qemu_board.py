"""`q25deploy qemu up` boots the emulated board (Debian's arm64 kernel and the test board's
BusyBox/dropbear initramfs, tests/emulated_board.py) with the qemu build's regions; deploy and
smoke --strict run against it as against a real board; `qemu down` stops it and removes what
`up` wrote. One boot."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from q25deploy.cli import main


def q25(capsys, *argv) -> tuple[int, object]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip().startswith(("[", "{")) else out)


def test_qemu_up_deploy_smoke_down(
    board_root, board_client_key, board_machine, builds, q25tok_aarch64, capsys, tmp_path
):
    import emulated_board as eb

    pub = Path(str(board_client_key) + ".pub").read_text()
    initrd = eb.assemble_initramfs(board_root, tmp_path / "initramfs.cpio", eb.InitramfsSpec("dropbear", pub))
    state, port, build = tmp_path / "q25-qemu", eb.free_port(), builds["qemu"]
    t = time.monotonic()
    code, up = q25(
        capsys,
        "qemu",
        "up",
        "--build",
        build,
        "--kernel",
        eb.kernel_image(board_root),
        "--initrd",
        initrd,
        "--state-dir",
        state,
        "--ssh-port",
        port,
        "--smp",
        board_machine.smp,
        "--wait",
        "--json",
    )
    assert code == 0, up
    try:
        with capsys.disabled():
            print(
                f"\nqemu up --wait: SSH up after {up['ssh_seconds']} s ({time.monotonic() - t:.1f} s with the "
                "device tree)"
            )
        assert up["host"] == f"root@127.0.0.1:{port}" and Path(up["serial_log"]).is_file()
        code, st = q25(capsys, "qemu", "status", "--state-dir", state, "--json")
        assert code == 0 and st["running"] and st["ssh"] and st["pid"] == up["pid"]
        conn = [
            "--target",
            "qemu",
            "--host",
            up["host"],
            "--build",
            build,
            "--identity",
            board_client_key,
            "--known-hosts",
            up["known_hosts"],
            "--json",
        ]
        code, res = q25(capsys, "deploy", *conn, "--trust-new-host", "--strict", "--runtime-bin", q25tok_aarch64)
        assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], res
        assert res[0]["residency"]["state"] == "resident"
        assert Path(up["known_hosts"]).read_text().split() == eb.known_hosts_line(port).split()
        code, res = q25(capsys, "smoke", *conn, "--strict")
        assert code == 0 and res[0]["smoke"]["ok"], res
        assert_status_svg_shows_residency(capsys, conn, build, tmp_path)
        assert_guest_reaches_nothing_outside(board_client_key, up)
    finally:
        code, down = q25(capsys, "qemu", "down", "--state-dir", state, "--json")
    assert code == 0 and down["stopped"] == "quit", down
    assert not Path(f"/proc/{up['pid']}/cmdline").exists() or not Path(f"/proc/{up['pid']}/cmdline").read_bytes()
    assert not state.exists()  # every file up wrote (and the known_hosts deploy filled) is gone, and the directory


def assert_guest_reaches_nothing_outside(key: Path, up: dict) -> None:
    """QEMU's user network with restrict=on: SSH comes in through the forward, but the guest
    cannot open a connection to the host (10.0.2.2) or beyond."""
    import paramiko

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        c = paramiko.SSHClient()
        c.load_host_keys(up["known_hosts"])
        c.connect("127.0.0.1", up["port"], "root", key_filename=str(key), look_for_keys=False, allow_agent=False)
        with c:
            _, out, _ = c.exec_command(f"timeout 5 nc 10.0.2.2 {listener.getsockname()[1]} </dev/null; echo rc=$?")
            answer = out.read().decode()
        with pytest.raises(socket.timeout):
            listener.accept()
    assert "rc=0" not in answer, answer


def region_fills(svg: Path) -> list[str]:
    import xml.etree.ElementTree as ET

    return [
        r.get("fill")
        for r in ET.parse(svg).getroot().iter("{http://www.w3.org/2000/svg}rect")
        if r.get("class") == "region"
    ]


def assert_status_svg_shows_residency(capsys, conn: list, build: Path, tmp_path: Path) -> None:
    """status --svg colours the regions with what q25tok verify reads back on the board: all
    resident after the deploy; a byte changed behind our back (BusyBox devmem) makes its
    region "differs"."""
    from q25deploy.board.svg import RESIDENCY

    regions = json.loads((build / "partition_map.json").read_text())["regions"]
    code, res = q25(capsys, "status", *conn, "--svg", tmp_path / "map.svg")
    assert code == 0 and res[0]["residency"] == "resident" and res[0]["svg"] == str(tmp_path / "map.svg"), res
    assert region_fills(tmp_path / "map.svg") == [RESIDENCY["resident"][1]] * len(regions)
    host = conn[conn.index("--host") + 1]
    base = regions[0]["base"]
    capsys.readouterr()
    table = [str(a) for a in ["status", *conn, "--svg", tmp_path / "table.svg"] if a != "--json"]
    assert main(table) == 0
    head, row = capsys.readouterr().out.splitlines()[:2]  # status's table: a header, a row per board
    assert head.split() == ["host", "ok", "current", "previous", "reserved", "residency", "detail"]
    # the detail: the forward pass the deploy recorded (deploy/state/forward_known.py), then the map
    detail = rf"forward pass passed \(1 prompt\); map {re.escape(str(tmp_path / 'table.svg'))}$"
    assert re.search(rf"\byes +resident +{detail}", row), row
    import paramiko

    key, known_hosts = conn[conn.index("--identity") + 1], conn[conn.index("--known-hosts") + 1]
    c = paramiko.SSHClient()
    c.load_host_keys(known_hosts)
    c.connect(
        "127.0.0.1", int(host.rsplit(":", 1)[1]), "root", key_filename=str(key), look_for_keys=False, allow_agent=False
    )
    with c:
        _, out, _ = c.exec_command(f"v=$(devmem {base:#x} 8) && devmem {base:#x} 8 $(( v ^ 1 )) && echo ok")
        assert out.read().decode().strip() == "ok"
    code, res = q25(capsys, "status", *conn, "--svg", tmp_path / "map.svg")
    assert code == 0 and res[0]["residency"] == "failed", res
    assert region_fills(tmp_path / "map.svg")[0] == RESIDENCY["differs"][1]
