"""Issue 11, defect 7 on the emulated board: what q25deploy's SSH transport negotiates with
dropbear 2022.83 and OpenSSH 9.2 (the pairings bench/bench_ssh_transport.py measured
fastest), and OpenSSH-independent proof that the layer's dropbear bbappend reaches dropbear:
OE-core's own init script, run on the board with the /etc/default/dropbear the bbappend
makes, starts dropbear with the window. Throughput itself is not asserted here (the host is
shared: wall-clock floors are not robust); the bench keeps the figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from board_checks import both_flavours
from board_fixtures import wait_until
from dropbear_default import apply_window, oe_dropbear_files, window_function

from q25deploy.cli import main
from q25deploy.deploy.transport.connection import ParamikoSession
from q25deploy.deploy.transport.hosts import HostSpec
from q25deploy.packer.dropbear import BBAPPEND

TARGETS = Path(__file__).resolve().parents[3] / "targets"
WINDOW = 1048576
PORT = 2222  # the second dropbear, started by OE-core's init script (the board's own keeps 22)
# (cipher, MAC, compression) q25deploy negotiates; OpenSSH's GCM carries its own integrity
# (dropbear: no common AEAD cipher; hmac-sha1 measured no faster than hmac-sha2-256 there)
EXPECTED = {"dropbear": ("aes128-ctr", "hmac-sha2-256", "none"), "openssh": ("aes128-gcm@openssh.com", None, "none")}


@both_flavours
def test_q25deploy_negotiates_the_fast_pairing(board):
    spec = HostSpec("127.0.0.1", "root", board.port)
    with ParamikoSession(spec, identity=str(board.key), known_hosts=str(board.known_hosts), trust_new_host=False) as b:
        t = b.transport
        cipher, mac, compression = EXPECTED[board.flavour]
        assert (t.local_cipher, t.local_compression) == (cipher, compression)
        assert (t.remote_cipher, t.remote_compression) == (cipher, compression)
        if mac:
            assert t.local_mac == t.remote_mac == mac
        # the channel's window and packet size for what the board sends back
        chan = b.start(["true"], 30)
        assert chan.in_window_size >= 16 << 20 and chan.in_max_packet_size == 32768
        chan.close()


def test_oe_init_script_starts_dropbear_with_the_layers_window(board, qwen25_tiny, tmp_path):
    d = tmp_path / "layer"
    d.mkdir()
    target = d / "kv260-window.toml"
    target.write_text(
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
                str(target),
                "--model",
                str(qwen25_tiny),
                "--out",
                str(d / "b"),
            ]
        )
        == 0
    )
    oe = oe_dropbear_files("scarthgap")  # the init script is the same in styhead and walnascar
    default = tmp_path / "dropbear.default"
    default.write_text(oe["dropbear.default"])
    apply_window(window_function((d / "b" / "meta-q25" / BBAPPEND).read_text()), default, WINDOW)
    # test-only lines: another port, and the board's fixed host key (no key generation)
    board.sh("mkdir -p /etc/default /var/run")
    board.put(
        "/etc/default/dropbear",
        default.read_bytes()
        + f"DROPBEAR_PORT={PORT}\nDROPBEAR_RSAKEY=/etc/dropbear/dropbear_ed25519_host_key\n".encode(),
    )
    board.put("/etc/init.d/dropbear", oe["init"].encode(), "0755")
    board.sh("/etc/init.d/dropbear start")
    try:
        assert wait_until(lambda: board.sh("test -s /var/run/dropbear.pid", check=False)[0] == 0)
        pid = board.sh("cat /var/run/dropbear.pid")[1].strip()
        argv = board.sh(f"tr '\\0' '\\n' < /proc/{pid}/cmdline")[1].split("\n")[:-1]
        assert argv[0] == "/usr/sbin/dropbear" and argv[-3:] == ["-w", "-W", str(WINDOW)], argv
        assert ["-p", str(PORT)] == argv[argv.index("-p") : argv.index("-p") + 2]
        assert wait_until(lambda: f":{PORT} " in board.sh("netstat -ltn")[1])
    finally:
        board.sh("/etc/init.d/dropbear stop; rm -f /etc/init.d/dropbear /etc/default/dropbear", check=False)
    assert wait_until(lambda: f":{PORT} " not in board.sh("netstat -ltn")[1])


@pytest.mark.parametrize("transport", ["openssh", "paramiko"])
def test_uploads_in_parallel_survive_dropbears_early_channel_close(board, transport):
    """dropbear 2022.83 (Debian's, the board's) closes a new session channel whose command has
    not started when another session of the connection ends meanwhile (dropbear issue #321,
    fixed in 2024.86): the upload's ssh exited 255 saying nothing, or dropbear failed an
    assertion and dropped the connection. Small files three at a time, as a deploy stages
    them, each a session of its own: before the session gate, 22 of 366 such uploads failed."""
    import io
    import os
    from concurrent.futures import ThreadPoolExecutor

    from q25deploy.deploy.transport import openssh
    from q25deploy.deploy.transport.sshboard import OpenSshSession

    spec = HostSpec("127.0.0.1", "root", board.port)
    if transport == "openssh":
        b = OpenSshSession(spec, openssh.find_client(), identity=str(board.key), known_hosts=str(board.known_hosts))
    else:
        b = ParamikoSession(spec, identity=str(board.key), known_hosts=str(board.known_hosts), trust_new_host=False)
    data = os.urandom(2092)  # the size of the tokenizer-only deploy's manifest
    with b:
        b.run(["mkdir", "-p", "/tmp/gate"])
        for round_ in range(16):
            b.expect_upload(len(data))
            with ThreadPoolExecutor(max_workers=3) as pool:
                # a new name each time: a receiver writes only a new file (docs/security.md)
                names = [f"/tmp/gate/{round_}-{k}" for k in range(6)]
                jobs = [pool.submit(b.upload, io.BytesIO(data), len(data), name) for name in names]
                digests = [j.result() for j in jobs]  # a DeployError fails the test here
            assert len(set(digests)) == 1, round_
        b.run(["rm", "-rf", "/tmp/gate"])
