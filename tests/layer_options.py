"""A board's layer with every option that adds or changes a recipe turned on: both OTA engines
(``[ota] mender``/``swupdate``: recipes q25-ota-mender, q25-ota-swupdate and SWUpdate's
bbappend), dropbear's receive window (``[ssh] dropbear_receive_window``: OE-core's dropbear
appended) and the user-space install path (``[install] path``). The layer tests read its text
(tests/packer/test_layer.py) and BitBake parses it on every series (test_bitbake_options.py)."""

from __future__ import annotations

from pathlib import Path

from q25deploy.cli import main

TARGETS = Path(__file__).resolve().parents[1] / "targets"
WINDOW = 1048576
# board-file line -> the same line with the option on
EDITS = {
    "mender = false": "mender = true",
    "swupdate = false": "swupdate = true",
    "dropbear_receive_window = 0": f"dropbear_receive_window = {WINDOW}",
    'path = "/lib/firmware/q25"': 'path = "/usr/share/q25"',
}


def board_text(target: str, edits: dict[str, str]) -> str:
    text = (TARGETS / f"{target}.toml").read_text()
    for old, new in edits.items():
        assert text.count(old) == 1, (target, old)
        text = text.replace(old, new)
    return text


def build_layer(d: Path, model: Path, target: str = "kv260", edits: dict[str, str] = EDITS) -> Path:
    """``target``'s meta-q25 built under ``d`` from its board file with ``edits``."""
    board = d / f"{target}-options.toml"
    board.write_text(board_text(target, edits))
    args = ["build", "--target", target, "--target-file", str(board), "--model", str(model), "--out", str(d / "b")]
    assert main(args) == 0
    return d / "b" / "meta-q25"
