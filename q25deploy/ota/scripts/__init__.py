"""The board-side script (``q25-ota.sh``), shipped as package data."""

from __future__ import annotations

from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "q25-ota.sh"


def board_script() -> bytes:
    return SCRIPT.read_bytes()
