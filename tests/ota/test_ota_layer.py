"""The layer's OTA parts: absent by default, present (and oelint-adv clean) when the board
file's [ota] asks for them; the update module in the layer is the board script itself."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from layer_options import build_layer
from requirements import need_program

from q25deploy.resources import ota_script


@pytest.fixture(scope="module")
def ota_layer(tmp_path_factory, qwen25_tiny) -> Path:
    edits = {"mender = false": "mender = true", "swupdate = false": "swupdate = true"}
    return build_layer(tmp_path_factory.mktemp("ota-layer"), qwen25_tiny, edits=edits)


def test_default_layer_has_no_ota_parts(builds):
    for target in ("kv260", "zcu104", "qemu"):
        layer = builds[target] / "meta-q25"
        assert not (layer / "recipes-q25" / "q25-ota").exists() and not (layer / "recipes-support").exists()
        assert not (layer / "dynamic-layers" / "swupdate").exists()


def test_ota_parts_when_asked(ota_layer):
    ota = ota_layer / "recipes-q25" / "q25-ota"
    assert (ota / "files" / "q25-ota.sh").read_bytes() == ota_script()
    mender = (ota / "q25-ota-mender_1.0.bb").read_text()
    assert "${datadir}/mender/modules/v3/q25-release" in mender and "@@" not in mender
    assert (ota / "files" / "hwrevision").read_text() == "kv260 1.0\n"
    md5 = hashlib.md5((ota / "files" / "LICENSE").read_bytes()).hexdigest()
    assert (
        f"file://LICENSE;md5={md5}" in mender
        and f"file://LICENSE;md5={md5}" in (ota / "q25-ota-swupdate_1.0.bb").read_text()
    )
    # meta-swupdate's recipe is appended only when that layer is in BBLAYERS (BBFILES_DYNAMIC)
    swu = ota_layer / "dynamic-layers" / "swupdate" / "recipes-support" / "swupdate"
    append = (swu / "swupdate_%.bbappend").read_text()
    assert 'SRC_URI:append:k26-smk-kv-sdt = " file://q25-handlers.cfg"' in append
    assert "CONFIG_SIGALG_CMS=y" in (swu / "files" / "q25-handlers.cfg").read_text()
    assert not (ota_layer / "recipes-support").exists()
    conf = (ota_layer / "conf" / "layer.conf").read_text()
    assert 'BBFILES_DYNAMIC += "swupdate:${LAYERDIR}/dynamic-layers/swupdate/recipes-*/*/*.bbappend"' in conf


@pytest.mark.parametrize("release", ["scarthgap", "walnascar"])
def test_ota_recipes_lint_clean(ota_layer, release):
    exe = need_program("oelint-adv", "pip install '.[test]' installs oelint-adv")
    files = sorted([*ota_layer.rglob("q25-ota-*.bb"), *ota_layer.rglob("swupdate_%.bbappend")])
    assert len(files) == 3
    r = subprocess.run([exe, "--quiet", "--release", release, *map(str, files)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr
