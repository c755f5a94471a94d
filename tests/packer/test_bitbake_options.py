"""Layer parts a board file turns on, under real BitBake (tests/yocto.py): SWUpdate's
bbappend (``[ota] swupdate = true``), active only when meta-swupdate is in BBLAYERS
(BBFILES_DYNAMIC), so a layer set without it still parses; dropbear's receive window
(``[ssh] dropbear_receive_window``), for the board's MACHINEs only.

The snapshots hold no meta-swupdate: a stand-in layer with its collection name
(``swupdate``, as meta-swupdate's conf/layer.conf names it) and a ``swupdate`` recipe
shows the bbappend reaching that recipe when the layer is there. Every recipe an option emits
(both OTA engines' recipes, the user-space install path, dropbear's bbappend) is parsed, and
its S checked, on every series the layer claims (``Q25_BITBAKE_SERIES`` narrows them): wrynose
refuses what scarthgap accepts. The layer-set tests of the dynamic layer (stand-in
meta-swupdate, a static bbappend) take one series, the first of ``Q25_BITBAKE_SERIES``:
BBFILES_DYNAMIC works alike in all of them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from dropbear_default import FUNCTION, window_function
from layer_options import EDITS, WINDOW, build_layer
from yocto import LAYER, SERIES, board_machines, selected, unpacked_s

SWU_DIR = ("dynamic-layers", "swupdate", "recipes-support", "swupdate")
OTA_RECIPES = ["q25-ota-swupdate", "q25-ota-mender", "q25-model-assets"]
OTA_VARS = [
    "FILE",
    "SRC_URI",
    "FILESEXTRAPATHS",
    "RDEPENDS:q25-ota-swupdate",
    "S",
    "WORKDIR",
    "UNPACKDIR",
    "Q25_INSTALL_DIR",
    "datadir",
]
EVERY_SERIES = selected("Q25_BITBAKE_SERIES", SERIES)
# the options whose recipes parse with only the layers meta-q25 declares (dropbear's bbappend
# needs OE-core's dropbear recipe, which the "declared" build masks)
OTA_EDITS = {k: v for k, v in EDITS.items() if "dropbear" not in k}


def _series() -> str:
    return selected("Q25_BITBAKE_SERIES", SERIES)[0]


@pytest.fixture(scope="module")
def swupdate_layer(tmp_path_factory, qwen25_tiny) -> Path:
    """kv260's layer with ``[ota] swupdate = true`` and ``mender = true`` and the user-space
    install path."""
    layer = build_layer(tmp_path_factory.mktemp("swupdate-layer"), qwen25_tiny, edits=OTA_EDITS)
    assert layer.joinpath(*SWU_DIR, "swupdate_%.bbappend").is_file()
    return layer


def _stand_in(ws, series: str) -> Path:
    """A layer with meta-swupdate's collection name and a swupdate recipe that builds nothing."""
    d = ws.tree(series) / "layers" / "meta-swupdate-stand-in"
    (d / "conf").mkdir(parents=True, exist_ok=True)
    (d / "conf" / "layer.conf").write_text(
        "# stand-in for meta-swupdate in the q25deploy tests: its collection name and recipe name only\n"
        'BBPATH .= ":${LAYERDIR}"\nBBFILES += "${LAYERDIR}/recipes-*/*/*.bb"\n'
        'BBFILE_COLLECTIONS += "swupdate"\nBBFILE_PATTERN_swupdate = "^${LAYERDIR}/"\n'
        'BBFILE_PRIORITY_swupdate = "6"\nLAYERDEPENDS_swupdate = "core"\n'
        f'LAYERSERIES_COMPAT_swupdate = "{series}"\n'
    )
    recipe = d / "recipes-support" / "swupdate" / "swupdate_1.0.bb"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(
        'SUMMARY = "stand-in for meta-swupdate\'s swupdate"\nLICENSE = "MIT"\n'
        'LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"\n'
        'INHIBIT_DEFAULT_DEPS = "1"\n'
    )
    ws.chown(d)
    return d


@pytest.mark.parametrize("series", EVERY_SERIES)
def test_swupdate_append_without_meta_swupdate_parses(ws, swupdate_layer, series):
    """Only the layers meta-q25 declares (no meta-swupdate), on every series: `bitbake -p` is
    clean, the recipes q25-ota-swupdate and q25-ota-mender are there (swupdate's RDEPENDS on
    swupdate only matters when built), and each option recipe's S is where that series'
    do_unpack puts its files (UNPACKDIR since whinlatter, WORKDIR before)."""
    bd = ws.build(series, "declared")
    bd.install("kv260-swupdate", swupdate_layer)
    r = bd.bitbake("-p", label="bitbake -p (swupdate = true, no meta-swupdate)")
    problems = r.errors() + r.warnings_naming(LAYER) + r.warnings_naming("q25")
    assert r.returncode == 0 and not problems, "\n".join(problems) or r.output[-3000:]
    ans = bd.probe(OTA_RECIPES, OTA_VARS, label="tinfoil probe (the OTA recipes)")
    assert "swupdate" in ans["recipes"]["q25-ota-swupdate"]["vars"]["RDEPENDS:q25-ota-swupdate"].split()
    for pn in OTA_RECIPES:
        v = ans["recipes"][pn]["vars"]
        assert Path(v["FILE"]).is_relative_to(bd.layer), (pn, v["FILE"])
        assert (v["S"], v["UNPACKDIR"]) == unpacked_s(series, v["WORKDIR"]), (pn, v)
    v = ans["recipes"]["q25-model-assets"]["vars"]
    assert v["Q25_INSTALL_DIR"] == f"{v['datadir']}/q25"


def test_a_static_swupdate_append_does_not_parse_without_meta_swupdate(ws, swupdate_layer, tmp_path):
    """The layout before: the bbappend in recipes-support/ is a dangling append without
    meta-swupdate, and BitBake stops (what the dynamic layer avoids)."""
    layer = tmp_path / LAYER
    shutil.copytree(swupdate_layer, layer)
    shutil.move(layer.joinpath(*SWU_DIR[:2], "recipes-support"), layer / "recipes-support")
    bd = ws.build(_series(), "declared")
    bd.install("kv260-swupdate-static", layer)
    r = bd.bitbake("-p", label="bitbake -p (static swupdate bbappend, no meta-swupdate)")
    # "ERROR: No recipes in default available for:" and the bbappend's path on the next line
    assert r.returncode != 0 and any("No recipes" in e for e in r.errors()), r.output[-3000:]
    assert "recipes-support/swupdate/swupdate_%.bbappend" in r.output


def test_swupdate_append_reaches_meta_swupdate_recipe(ws, swupdate_layer):
    """With a layer of collection "swupdate" in BBLAYERS the bbappend is active: the
    swupdate recipe of MACHINE k26-smk-kv-sdt gets q25-handlers.cfg from meta-q25."""
    series = _series()
    bd = ws.build(series, "swupdate-stand-in", extra=(_stand_in(ws, series),))
    bd.install("kv260-swupdate", swupdate_layer)
    r = bd.bitbake("-p", label="bitbake -p (swupdate = true, stand-in meta-swupdate)")
    problems = r.errors() + r.warnings_naming(LAYER) + r.warnings_naming("q25")
    assert r.returncode == 0 and not problems, "\n".join(problems) or r.output[-3000:]
    ans = bd.probe(["swupdate"], OTA_VARS, label="tinfoil probe (swupdate + meta-q25)")
    src = dict(ans["recipes"]["swupdate"]["src"])
    cfg = bd.layer.joinpath(*SWU_DIR, "files", "q25-handlers.cfg")
    assert src.get("file://q25-handlers.cfg") == str(cfg), src
    assert (
        Path(src["file://q25-handlers.cfg"]).read_bytes()
        == swupdate_layer.joinpath(*SWU_DIR, "files", "q25-handlers.cfg").read_bytes()
    )


# -- dropbear's receive window ([ssh] dropbear_receive_window) ------------------------------
DROPBEAR_VARS = ["PACKAGE_ARCH", "MACHINE_ARCH", "TUNE_PKGARCH", "do_install", FUNCTION]


@pytest.fixture(scope="module")
def dropbear_layer(tmp_path_factory, qwen25_tiny) -> Path:
    """kv260's layer with every option on (tests/layer_options.py), among them
    ``[ssh] dropbear_receive_window = 1048576``."""
    return build_layer(tmp_path_factory.mktemp("dropbear-layer"), qwen25_tiny)


@pytest.mark.parametrize("series", EVERY_SERIES)
def test_dropbear_window_for_the_boards_machines_only(ws, dropbear_layer, series):
    """With all of OE-core parsed, on every series, and every option on: `bitbake -p` stays
    clean, BitBake unpacks the Mender recipe and finds its licence (do_populate_lic: the
    files are where S says), and OE-core's dropbear of each of kv260's MACHINEs calls the
    window function from do_install and is a MACHINE package; another MACHINE's dropbear is
    as OE-core builds it. The function BitBake holds is the one the host and board tests run."""
    bd = ws.build(series, "xilinx")
    bd.install("kv260-every-option", dropbear_layer)
    r = bd.bitbake("-p", label="bitbake -p (every option)")
    problems = r.errors() + r.warnings_naming(LAYER) + r.warnings_naming("q25")
    assert r.returncode == 0 and not problems, "\n".join(problems) or r.output[-3000:]
    r = bd.bitbake("-c", "populate_lic", "q25-ota-mender", label="do_populate_lic (q25-ota-mender)")
    assert r.returncode == 0 and not r.errors(), r.output[-3000:]
    assert list(bd.path.glob("tmp*/deploy/licenses/**/q25-ota-mender/LICENSE")), r.output[-3000:]
    [recipe] = (bd.tree / "openembedded-core" / "meta" / "recipes-core" / "dropbear").glob("dropbear_*.bb")
    ans = bd.probe(
        [],
        [],
        {
            "recipe": str(recipe),
            "file": "-",
            "strip": board_machines(),
            "vars": DROPBEAR_VARS,
            "cases": {
                "k26-smk-kv-sdt": ["zynqmp", "k26-smk-kv-sdt"],
                "xilinx-k26-kv": ["zynqmp", "xilinx-k26-kv"],
                "other": ["zynqmp", "zynqmp-generic"],
            },
        },
        label="tinfoil probe (dropbear)",
    )
    assert str(bd.layer / "recipes-core" / "dropbear" / "dropbear_%.bbappend") in ans["device_tree"]["appends"]
    text = (dropbear_layer / "recipes-core" / "dropbear" / "dropbear_%.bbappend").read_text()
    for name, case in ans["device_tree"]["cases"].items():
        v = case["vars"]
        calls = re.findall(rf"^\s*{FUNCTION} (\S+)/default/dropbear (\d+)$", v["do_install"], re.M)
        if name == "other":
            assert not calls and v["PACKAGE_ARCH"] == v["TUNE_PKGARCH"] != v["MACHINE_ARCH"], (name, v)
            continue
        assert [w for _, w in calls] == [str(WINDOW)] and calls[0][0].endswith("/image/etc"), (name, calls)
        assert v["PACKAGE_ARCH"] == v["MACHINE_ARCH"], (name, v)
        assert v[FUNCTION].strip() == window_function(text).split("\n", 1)[1].rsplit("}", 1)[0].strip()
