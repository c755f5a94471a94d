"""Issue 11, defect 7 on the emulated board: what q25deploy's SSH transport negotiates with
dropbear 2022.83 and OpenSSH 9.2 (the pairings bench/bench_ssh_transport.py measured
fastest), and OpenSSH-independent proof that the layer's dropbear bbappend reaches dropbear:
OE-core's own init script, run on the board with the /etc/default/dropbear the bbappend
makes, starts dropbear with the window. Throughput itself is not asserted here (the host is
shared: wall-clock floors are not robust); the bench keeps the figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from board_fixtures import wait_until
from dropbear_default import apply_window, oe_dropbear_files, window_function

from q25deploy.cli import main
from q25deploy.deploy.connection import Board
from q25deploy.deploy.hosts import HostSpec
from q25deploy.packer.dropbear import BBAPPEND

pytestmark = pytest.mark.board

TARGETS = Path(__file__).resolve().parents[3] / "targets"
WINDOW = 1048576
PORT = 2222  # the second dropbear, started by OE-core's init script (the board's own keeps 22)
# (cipher, MAC, compression) q25deploy negotiates; OpenSSH's GCM carries its own integrity
# (dropbear: no common AEAD cipher; hmac-sha1 measured no faster than hmac-sha2-256 there)
EXPECTED = {"dropbear": ("aes128-ctr", "hmac-sha2-256", "none"), "openssh": ("aes128-gcm@openssh.com", None, "none")}


def test_q25deploy_negotiates_the_fast_pairing(board):
    spec = HostSpec("127.0.0.1", "root", board.port)
    with Board(spec, identity=str(board.key), known_hosts=str(board.known_hosts), trust_new_host=False) as b:
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


@pytest.mark.parametrize("board", ["dropbear"], indirect=True)
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
