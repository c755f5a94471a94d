"""The state directory of `qemu up`: state.json round trip, refusal of malformed or unsafe
state files, and `down` removing only the files `up` wrote."""

from __future__ import annotations

import json

import pytest

from q25deploy.errors import SchemaError
from q25deploy_plugins.qemu.state import State, read_state, remove_files, write_state

FILES = ["board.dtb", "qemu.pid", "serial.log", "state.json"]


def test_round_trip_and_only_our_files_are_removed(tmp_path):
    d = tmp_path / "q25-qemu"
    d.mkdir()
    state = State(4242, 2222, "root", ["qemu-system-aarch64", "-pidfile", str(d / "qemu.pid")], FILES, True)
    write_state(d, state)
    assert read_state(d) == state and read_state(tmp_path) is None
    for name in FILES[:-1]:
        (d / name).write_text("x")
    (d / "notes.txt").write_text("the user's")
    assert remove_files(d, state) == FILES
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]  # and the directory stays
    (d / "notes.txt").unlink()
    write_state(d, state)
    remove_files(d, state)
    assert not d.exists()  # made by up, empty now: gone


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        json.dumps([1]),
        json.dumps({"version": 2}),
        json.dumps({"version": 1, "pid": 1, "port": 2222, "user": "root", "argv": [], "files": [], "made_dir": True}),
        json.dumps(
            {"version": 1, "pid": 99, "port": 2222, "user": "root", "argv": [], "files": ["../x"], "made_dir": True}
        ),
        json.dumps({"version": 1, "pid": 99, "port": 2222, "user": "root", "argv": [], "files": [], "extra": 1}),
    ],
)
def test_a_malformed_state_file_is_refused(tmp_path, bad):
    (tmp_path / "state.json").write_text(bad)
    with pytest.raises(SchemaError, match="not a q25deploy qemu state file"):
        read_state(tmp_path)
