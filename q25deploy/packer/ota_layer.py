"""What the BitBake layer gains for an OTA engine, when the board file's ``[ota]`` asks
(``mender = true`` / ``swupdate = true``; both off by default).

Mender: recipe ``q25-ota-mender`` installs the board script as the update module
``/usr/share/mender/modules/v3/q25-release``. SWUpdate: recipe ``q25-ota-swupdate``
installs ``/etc/hwrevision`` ("BOARD REVISION", what ``hardware-compatibility`` is checked
against) and a ``swupdate_%.bbappend`` with the handler configuration the ``.swu`` needs.
The bbappend lives under ``dynamic-layers/swupdate`` (BBFILES_DYNAMIC in conf/layer.conf):
it is active only when meta-swupdate (collection ``swupdate``) is in BBLAYERS, so a layer
set without it still parses. Templates live in the repository's ``recipes/ota``.
"""

from __future__ import annotations

import hashlib

from ..board.ota_settings import check_name, ota_settings
from ..resources import data_dir, ota_script, runtime_sources
from .layer import LayerFile, render

RECIPES = "recipes-q25/q25-ota"
# meta-swupdate's recipe is appended only when that layer is present
SWUPDATE_APPEND_DIR = "dynamic-layers/swupdate/recipes-support/swupdate"


def _template(rel: str) -> str:
    return (data_dir("recipes") / "ota" / rel).read_text()


def ota_layer_files(board) -> list[LayerFile]:
    settings = ota_settings(board)
    license_text = (runtime_sources() / "LICENSE").read_bytes()
    values = {
        "BOARD": board.name,
        "MACHINE": board.yocto_machine or board.name,
        "LICENSE_MD5": hashlib.md5(license_text).hexdigest(),
    }
    out: list[LayerFile] = []
    if settings["mender"] or settings["swupdate"]:
        out.append(LayerFile(f"{RECIPES}/files/LICENSE", license_text))
    if settings["mender"]:
        out.append(
            LayerFile(
                f"{RECIPES}/q25-ota-mender_1.0.bb",
                render(_template(f"{RECIPES}/q25-ota-mender.bb.in"), values).encode(),
            )
        )
        out.append(LayerFile(f"{RECIPES}/files/q25-ota.sh", ota_script()))
    if settings["swupdate"]:
        rev = check_name(settings["swupdate_hw_revision"], "[ota] swupdate_hw_revision")
        out.append(
            LayerFile(
                f"{RECIPES}/q25-ota-swupdate_1.0.bb",
                render(_template(f"{RECIPES}/q25-ota-swupdate.bb.in"), values).encode(),
            )
        )
        out.append(LayerFile(f"{RECIPES}/files/hwrevision", f"{check_name(board.name, 'board name')} {rev}\n".encode()))
        append = f"{SWUPDATE_APPEND_DIR}/swupdate_%.bbappend"
        out.append(LayerFile(append, render(_template(append + ".in"), values).encode()))
        cfg = f"{SWUPDATE_APPEND_DIR}/files/q25-handlers.cfg"
        out.append(LayerFile(cfg, _template(cfg).encode()))
    return out
