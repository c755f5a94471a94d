"""The board file's ``[ota]`` table with its defaults: which engines the layer supports, the
Mender device type and the SWUpdate hardware revision."""

from __future__ import annotations

import re

from ..errors import PackageError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def check_name(value: str, where: str) -> str:
    """``value``, a plain name (a board name, a device type, a hardware revision), or a
    PackageError naming ``where``."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise PackageError(f"{where}: {value!r} is not a plain name ([A-Za-z0-9._+-])")
    return value


def ota_settings(board) -> dict:
    """The board file's ``[ota]`` table with its defaults."""
    ota = dict(getattr(board, "ota", {}) or {})
    return {
        "mender": bool(ota.get("mender", False)),
        "swupdate": bool(ota.get("swupdate", False)),
        "mender_device_type": ota.get("mender_device_type") or board.yocto_machine or board.name,
        "swupdate_hw_revision": ota.get("swupdate_hw_revision") or "1.0",
    }
