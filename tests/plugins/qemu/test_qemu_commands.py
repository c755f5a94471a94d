"""`q25deploy qemu up|down|status` without a real boot: every error is one line with its
documented exit code, a board that never answers is reported with its serial log and cleaned
up by `down`, and `down` stops only the QEMU it started. (The real boot, deploy and smoke test
are in test_qemu_board.py.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from requirements import need_program
from test_qemu_machine import FRAGMENT

from q25deploy.cli import main
from q25deploy_plugins.qemu.state import State, write_state


@pytest.fixture
def build(tmp_path) -> Path:
    """What `qemu up` reads of a qemu build: its reserved-memory.dtsi and build.json."""
    b = tmp_path / "q25-build" / "qemu"
    b.mkdir(parents=True)
    (b / "reserved-memory.dtsi").write_text(FRAGMENT)
    (b / "build.json").write_text(json.dumps({"target": "qemu"}))
    return b


@pytest.fixture
def junk(tmp_path) -> Path:
    """A "kernel" that boots nothing: QEMU runs it, SSH never answers."""
    k = tmp_path / "junk.bin"
    k.write_bytes(b"\0" * 4096)
    return k


def q25(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("q25deploy: error: "), err
    return lines[0]


def test_usage_errors_exit_2_and_a_board_without_qemu_11(capsys, tmp_path, build, junk):
    code, _, err = q25(capsys, "qemu", "up", "--build", tmp_path / "none", "--kernel", junk)
    assert code == 2 and "no reserved-memory.dtsi there (run q25deploy build --target qemu" in one_error(err)
    code, _, err = q25(capsys, "qemu", "up", "--build", build)
    assert code == 2 and "give --kernel FILE" in one_error(err)
    code, _, err = q25(capsys, "qemu", "up", "--build", build, "--kernel", tmp_path / "vmlinuz")
    assert code == 2 and one_error(err).endswith("--kernel " + str(tmp_path / "vmlinuz") + ": no such file")
    code, _, err = q25(capsys, "qemu", "up", "--target", "kv260", "--build", build, "--kernel", junk)
    assert code == 11 and "no [qemu] table: 'kv260' is not an emulated board" in one_error(err)
    (build / "build.json").write_text(json.dumps({"target": "kv260"}))
    code, _, err = q25(capsys, "qemu", "up", "--build", build, "--kernel", junk)
    assert code == 2 and "is a build for 'kv260', not 'qemu'" in one_error(err)


def test_missing_tools_exit_9(capsys, tmp_path, monkeypatch, build, junk):
    code, _, err = q25(
        capsys, "qemu", "up", "--build", build, "--kernel", junk, "--qemu", tmp_path / "qemu-system-aarch64"
    )
    assert code == 9 and one_error(err).endswith("qemu-system-aarch64 not found (Debian: qemu-system-arm)")
    qemu = need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qemu-system-aarch64").symlink_to(qemu)
    monkeypatch.setenv("PATH", str(bin_dir))
    code, _, err = q25(capsys, "qemu", "up", "--build", build, "--kernel", junk, "--state-dir", tmp_path / "s")
    assert code == 9 and one_error(err).endswith("dtc not found (Debian: device-tree-compiler)")
    assert not (tmp_path / "s").exists()


def test_a_port_in_use_exits_2_and_leaves_nothing(capsys, tmp_path, build, junk):
    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    need_program("dtc", "Debian: device-tree-compiler")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = q25(
            capsys, "qemu", "up", "--build", build, "--kernel", junk, "--ssh-port", port, "--state-dir", tmp_path / "s"
        )
    assert code == 2 and f"127.0.0.1:{port} is in use" in one_error(err)
    assert not (tmp_path / "s").exists()  # what up wrote before it found out is gone again


def test_a_board_that_never_answers(capsys, tmp_path, build, junk):
    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    need_program("dtc", "Debian: device-tree-compiler")
    state_dir = tmp_path / "q25-qemu"
    up = ["qemu", "up", "--build", build, "--kernel", junk, "--state-dir", state_dir, "--smp", "1"]
    code, _, err = q25(capsys, *up, "--ssh-port", _free_port(), "--wait", "--timeout", "2")
    assert code == 13 and "no SSH banner on 127.0.0.1:" in one_error(err) and "serial.log ends: (empty)" in err
    code, out, _ = q25(capsys, "qemu", "status", "--state-dir", state_dir, "--json")
    st = json.loads(out)
    assert code == 0 and st["running"] and not st["ssh"]
    pid = st["pid"]
    assert (state_dir / "board.dtb").is_file() and (state_dir / "serial.log").exists()
    code, _, err = q25(capsys, *up, "--ssh-port", _free_port())
    assert code == 2 and f"a board already runs from {state_dir} (pid {pid}" in one_error(err)
    code, out, _ = q25(capsys, "qemu", "down", "--state-dir", state_dir, "--json")
    res = json.loads(out)
    assert code == 0 and res["stopped"] == "quit" and "board.dtb" in res["removed"]
    assert not Path(f"/proc/{pid}").exists() or not Path(f"/proc/{pid}/cmdline").read_bytes()
    assert not state_dir.exists()  # up made it; down removed what up wrote, and the empty directory
    code, out, _ = q25(capsys, "qemu", "down", "--state-dir", state_dir)
    assert code == 0 and "nothing to stop" in out


def test_down_stops_only_the_qemu_it_started(capsys, tmp_path):
    """A state file naming another process (a reused pid, a hand-edited file): down leaves it."""
    d = tmp_path / "q25-qemu"
    d.mkdir()
    other = subprocess.Popen(["sleep", "60"])
    try:
        argv = ["qemu-system-aarch64", "-pidfile", str(d / "qemu.pid")]
        write_state(d, State(other.pid, 2222, "root", argv, ["state.json"], False))
        code, out, _ = q25(capsys, "qemu", "down", "--state-dir", d)
        assert code == 0 and f"QEMU (pid {other.pid}) was not running" in out
        assert other.poll() is None  # still running
        assert d.is_dir() and not os.listdir(d)  # its state file removed, the directory (not made by up) kept
    finally:
        other.kill()
        other.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_from_a_yocto_deploy_directory(capsys, tmp_path, build):
    """The kernel, root disk and kernel arguments come from the image's qemuboot.conf (its
    machine's virtio-pci devices too); QEMU runs them (nothing boots: the files are stand-ins)."""
    from test_qemu_yocto import IMAGE, KERNEL, deploy_dir

    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    need_program("dtc", "Debian: device-tree-compiler")
    d = deploy_dir(tmp_path / "poky")
    state_dir = tmp_path / "q25-qemu"
    code, out, err = q25(
        capsys,
        "qemu",
        "up",
        "--build",
        build,
        "--yocto-deploy",
        d,
        "--state-dir",
        state_dir,
        "--ssh-port",
        _free_port(),
        "--smp",
        "1",
        "--append",
        "quiet",
        "--json",
    )
    assert code == 0, err
    r = json.loads(out)
    assert r["kernel"] == str(d / KERNEL) and r["initrd"] is None and r["drives"] == [str(d / f"{IMAGE}.ext4")]
    assert r["cmdline"] == "console=ttyAMA0 panic=-1 swiotlb=0 ip=dhcp root=/dev/vda rw quiet"
    argv = json.loads((state_dir / "state.json").read_text())["argv"]
    assert Path(f"/proc/{r['pid']}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]
    assert "virtio-blk-pci,drive=hd0" in argv and "virtio-net-pci,netdev=n0,romfile=" in argv
    code, out, _ = q25(capsys, "qemu", "down", "--state-dir", state_dir)
    assert code == 0 and out.startswith(f"stopped QEMU (pid {r['pid']}") and not state_dir.exists()
