"""A fleet through a real update server: goosebit (hawkBit's device API) on loopback and 20
boards, each Debian's ``swupdate`` in suricatta mode (``swupdate -u``) with its own device id,
root, /etc/hwrevision and stand-in device tree and memory (real_clients.py), polling it every
second. The signed ``package --format swupdate`` images are uploaded through goosebit's API,
which matches them to the boards by the (board, revision) pairs of their sw-description, and
rolled out in waves, one feed of 5 boards after the other: first a full release, then a
tokenizer-only image. A wave may take as long as its boards keep making progress (a state on the
server, or a line of install work in a board's log): on 2 cores beside the rest of CI an
install is slow, and a fixed deadline failed a wave that was still installing.

Every board that can hold the release ends with it resident and the server records its
success; one board whose running device tree does not reserve the release's regions refuses
it, reports the failure to the server and keeps the release it had.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from goosebit_server import Goosebit, goosebit_python
from ota_helpers import INSTALL, layout, package, resident
from real_clients import ClientBoard, current_release, need_clients, stop

BOARDS = 20
REFUSING = f"q25-board-{BOARDS:02d}"  # booted with a device tree that does not reserve the release's regions
WAVE = 5  # boards per feed, rolled out to one after the other
STALL = 90  # seconds a wave may go without progress
CAP = 600  # seconds a wave may take in all
# suricatta's polling, repeated every second while a board installs: not progress
POLLING = re.compile(rb"channel_log_effective_url|server_get_deployment_info|Error write on socket ctrl")


def signed(build, out, keys, board_file, *extra):
    sign = ["--sign-key", str(keys["rsa.pem"]), "--sign-cert", str(keys["rsa.crt"])]
    return package(build, "swupdate", out, *sign, "--target-file", str(board_file), "--forward", "0", *extra)


@pytest.fixture
def server(tmp_path):
    python = goosebit_python()
    (tmp_path / "goosebit").mkdir()
    gb = Goosebit(tmp_path / "goosebit", python)
    try:
        gb.start()
        yield gb
    finally:
        gb.stop()


class Fleet:
    """The boards and their suricatta daemons."""

    def __init__(self, boards: dict[str, ClientBoard], server: Goosebit, cert, logs):
        self.boards, self.server, self.cert, self.logs = boards, server, cert, logs
        self.daemons: dict = {}

    def start_all(self) -> None:
        for name in self.boards:
            self.start(name)

    def start(self, name: str, sw_version: str | None = None) -> None:
        board = self.boards[name]
        self.daemons[name] = board.suricatta(
            (self.server.port, self.server.socket), name, self.cert, self.logs / f"{name}.log", sw_version
        )

    def reboot_marked(self, version: str) -> None:
        """The boards whose update asked for a reboot (they installed ``version``, the one
        rolled out): their daemon started again, running that version and confirming it."""
        for name, board in self.boards.items():
            if board.reboot_mark.exists():
                stop(self.daemons[name])
                board.reboot_mark.unlink()
                self.start(name, version)

    def stop(self) -> None:
        for proc in self.daemons.values():
            stop(proc)


@pytest.fixture
def fleet(tmp_path, busybox_path, q25tok_bin, ota_builds, keys, server):
    """The boards (:meth:`Fleet.start_all` starts their daemons); the refusing one holds release B (installed
    with ``swupdate -i`` while its device tree reserved B's regions, then booted without them)."""
    need_clients()
    boards = {}
    for i in range(1, BOARDS + 1):
        name = f"q25-board-{i:02d}"
        boards[name] = ClientBoard(
            tmp_path / name,
            busybox_path=busybox_path,
            q25tok=q25tok_bin,
            hw_revision="qemu 1.0",
            reserving=(ota_builds["B"],),
        )
    refusing = boards[REFUSING]
    b = signed(ota_builds["B"], tmp_path / "b.swu", keys, refusing.board_file)
    r = refusing.swupdate(b, keys["rsa.crt"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    dt = refusing.memory.parent / "device-tree" / "reserved-memory"
    for node in dt.iterdir():
        for f in node.iterdir():
            f.unlink()
        node.rmdir()
    fleet = Fleet(boards, server, keys["rsa.crt"], tmp_path)
    try:
        yield fleet
    finally:
        fleet.stop()


class Progress:
    """What a set of boards has done so far: their states on the server and the lines of
    install work (not suricatta's polling) in their logs, read as they grow."""

    def __init__(self, logs: Path, boards):
        self.logs, self.boards = logs, sorted(boards)
        self.read = dict.fromkeys(self.boards, 0)
        self.work = 0

    def mark(self, devices: dict[str, dict]) -> tuple:
        for d in self.boards:
            log = self.logs / f"{d}.log"
            if not log.exists():
                continue
            with open(log, "rb") as f:
                f.seek(self.read[d])
                chunk = f.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]
            self.read[d] += len(whole)
            self.work += sum(1 for line in whole.splitlines() if not POLLING.search(line))
        states = tuple(
            (devices[d]["last_state"], devices[d]["sw_version"]) if d in devices else None for d in self.boards
        )
        return states, self.work


def wait_for(server, fleet, boards, version, tmp_path, done_when) -> dict[str, dict]:
    """Until ``done_when(device)`` holds for every one of ``boards`` on the server; fails when
    they make no progress for :data:`STALL` seconds, or take :data:`CAP` in all."""
    start = last = time.monotonic()
    progress = Progress(tmp_path, boards)
    seen = None
    while True:
        fleet.reboot_marked(version)
        devices = server.devices()
        done = {d for d, dev in devices.items() if done_when(dev)}
        if done >= set(boards):
            return devices
        now = time.monotonic()
        mark = progress.mark(devices)
        if mark != seen:
            seen, last = mark, now
        if now - last > STALL or now - start > CAP:
            late = sorted(set(boards) - done)
            states = {d: (devices[d]["last_state"], devices[d]["sw_version"]) if d in devices else None for d in late}
            log = (tmp_path / f"{late[0]}.log").read_text(errors="replace")[-3000:]
            pytest.fail(
                f"{len(late)} boards not done with {version} after {now - start:.0f} s "
                f"({now - last:.0f} s without progress): {states}\n{late[0]}'s log:\n{log}"
            )
        time.sleep(1)


def roll_out(server, fleet, name, software_id, version, tmp_path) -> dict[str, dict]:
    """The image to every wave's feed in turn, each once the one before has reported (installed
    it, or failed): the server's records of the boards and the rollouts' counts."""
    counts = {}
    for w, wave in enumerate(waves(fleet.boards)):
        rollout = server.rollout(f"{name} wave {w + 1}", software_id, feed=f"wave-{w + 1}")
        wait_for(
            server,
            fleet,
            wave,
            version,
            tmp_path,
            lambda dev: (
                dev["last_state"] == "Error" or (dev["last_state"] == "Finished" and dev["sw_version"] == version)
            ),
        )
        r = server.rollouts()[rollout]
        counts[f"wave-{w + 1}"] = (r["success_count"], r["failure_count"])
    return {"devices": server.devices(), "counts": counts}


def waves(boards) -> list[list[str]]:
    names = sorted(boards)
    return [names[i : i + WAVE] for i in range(0, len(names), WAVE)]


def test_a_rollout_reaches_every_board_and_a_refusing_board_is_reported_failed(
    campaign, tmp_path, server, fleet, ota_builds, keys
):
    boards = fleet.boards
    board_file = boards[REFUSING].board_file
    full = signed(ota_builds["A"], tmp_path / "a.swu", keys, board_file)
    tok = signed(ota_builds["A2"], tmp_path / "a2-tok.swu", keys, board_file, "--tokenizer-only")
    kept = layout(boards[REFUSING].root)
    ids = {}
    for swu in (full, tok):
        ids[swu] = server.upload(swu)
    software = server.software()
    for sid in ids.values():
        # goosebit read the version and the board section's compatibility from the sw-description
        pairs = [(c["model"], c["revision"]) for c in software[sid]["compatibility"]]
        assert pairs == [("qemu", "1.0")], software[sid]
    versions = {swu: software[sid]["version"] for swu, sid in ids.items()}
    assert all(v.startswith("1.0.0+") for v in versions.values()) and len(set(versions.values())) == 2
    fleet.start_all()  # after the uploads: goosebit 0.2.12 may fail an upload beside 20 registrations (500)

    # every board registered (its configData: board name and revision), then put in its wave's feed
    wait_for(server, fleet, boards, "registration", tmp_path, lambda dev: dev["last_state"] == "Registered")
    for w, wave in enumerate(waves(boards)):
        server.set_feed(wave, f"wave-{w + 1}")
    assert {d["hardware"]["model"] + " " + d["hardware"]["revision"] for d in server.devices().values()} == {"qemu 1.0"}
    fine = sorted(set(boards) - {REFUSING})
    last = f"wave-{len(waves(boards))}"

    seen = roll_out(server, fleet, "full release A", ids[full], versions[full], tmp_path)
    devices = seen["devices"]
    assert all(devices[d]["last_state"] == "Finished" and devices[d]["sw_version"] == versions[full] for d in fine)
    assert devices[REFUSING]["last_state"] == "Error" and devices[REFUSING]["sw_version"] != versions[full]
    # goosebit 0.2.12 counts a rollout's reports by read-modify-write: two boards reporting at
    # once count one. So each board's record is the check; the counts only bound it
    assert {w: f for w, (_, f) in seen["counts"].items()} == {w: int(w == last) for w in seen["counts"]}
    assert all(0 < ok <= WAVE - (w == last) for w, (ok, _) in seen["counts"].items())
    assert "does not reserve" in server.device_log(REFUSING)  # the board's error, on the server
    release_a = None
    for d in fine:
        release = current_release(boards[d].root)
        release_a = release_a or release.name
        assert release.name == release_a and resident(boards[d].memory, ota_builds["A"]), d
        assert not (boards[d].root / INSTALL / ".q25-ota-incoming").exists()
    assert layout(boards[REFUSING].root) == kept and resident(boards[REFUSING].memory, ota_builds["B"])

    seen = roll_out(server, fleet, "tokenizer A2", ids[tok], versions[tok], tmp_path)
    devices = seen["devices"]
    assert all(devices[d]["last_state"] == "Finished" and devices[d]["sw_version"] == versions[tok] for d in fine)
    assert all(0 < ok <= WAVE - (w == last) and failed == 0 for w, (ok, failed) in seen["counts"].items())
    assert devices[REFUSING]["last_state"] == "Error"  # the server offers nothing to a failed board
    tokenizer = (ota_builds["A2"] / "tokenizer" / "tokenizer.q25tokrt").read_bytes()
    for d in fine:
        release = current_release(boards[d].root)
        assert release.name != release_a and (release / "tokenizer.q25tokrt").read_bytes() == tokenizer
        assert resident(boards[d].memory, ota_builds["A"]), d  # A's partitions kept
    assert layout(boards[REFUSING].root) == kept
