"""The board file's ``[ota]`` table with its defaults: which engines the layer supports, the
Mender device type and the SWUpdate hardware revision."""

from __future__ import annotations


def ota_settings(board) -> dict:
    """The board file's ``[ota]`` table with its defaults."""
    ota = dict(getattr(board, "ota", {}) or {})
    return {
        "mender": bool(ota.get("mender", False)),
        "swupdate": bool(ota.get("swupdate", False)),
        "mender_device_type": ota.get("mender_device_type") or board.yocto_machine or board.name,
        "swupdate_hw_revision": ota.get("swupdate_hw_revision") or "1.0",
    }
