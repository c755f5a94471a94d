"""The emitted meta-q25 under real BitBake + OpenEmbedded-Core on every series its
LAYERSERIES_COMPAT names (langdale, scarthgap, whinlatter, wrynose; tests/yocto.py): it parses
cleanly with only the layers it declares and with meta-arm (+ meta-xilinx-core where the
snapshot has it: langdale's rel-v2024.1, scarthgap), its recipes say what they should (licence checksums, sources,
PACKAGE_ARCH, FILES), BitBake itself runs do_fetch/do_unpack/do_populate_lic of them offline,
the device-tree bbappend reaches meta-xilinx's recipe for the board's MACHINEs, and a
broken layer fails those same checks.

``Q25_BITBAKE_SERIES`` / ``Q25_BITBAKE_BOARDS`` (space-separated) narrow the matrix."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from yocto import (
    BOARDS,
    DEVICE_TREE,
    LAYER,
    SERIES,
    SERIES_INFO,
    UNPACK_SUBDIR,
    board_machines,
    edited_layer,
    selected,
    unpacked_s,
)
from yocto_checks import check_license, check_packaging, check_sources, md5, package_of

from q25deploy.cli import main

DT_DIR = ("dynamic-layers", "xilinx", "recipes-bsp", "device-tree")
DTSI = "q25-reserved-memory.dtsi"
ASSETS, RUNTIME, GROUP = "q25-model-assets", "q25-tokenizer-runtime", "packagegroup-q25"
REGIONS = "q25-regions"  # the boot service that loads the partitions into reserved memory
VARS = [
    "LICENSE",
    "LIC_FILES_CHKSUM",
    "PACKAGE_ARCH",
    "MACHINE_ARCH",
    "TUNE_PKGARCH",
    "PACKAGES",
    "PN",
    "PV",
    "S",
    "WORKDIR",
    "UNPACKDIR",
    "COMPATIBLE_MACHINE",
    "EXTRA_OEMAKE",
    "RDEPENDS:packagegroup-q25",
    "includedir",
    "bindir",
    "libdir",
    "nonarch_base_libdir",
    "FILE",
    "sbindir",
    "sysconfdir",
    "systemd_system_unitdir",
]
MACHINES = {"kv260": ["k26-smk-kv-sdt", "xilinx-k26-kv"], "zcu104": ["zynqmp-zcu104-sdt-full", "xilinx-zcu104"]}


MATRIX = [(s, b) for s in selected("Q25_BITBAKE_SERIES", SERIES) for b in selected("Q25_BITBAKE_BOARDS", BOARDS)]


def _bsp_matrix() -> list[tuple[str, str]]:
    """The (series, board) pairs of the "xilinx" build (all of OE-core's recipes, meta-arm,
    meta-xilinx-core where the snapshot has it). On a series whose snapshot has no meta-xilinx
    (whinlatter, wrynose) that build is OE-core + meta-arm only: kv260's and zcu104's own part,
    the device-tree bbappend in dynamic-layers/xilinx, stays inactive there (their "declared"
    parse on that series shows the layer parses so), and the rest of their layers differs from
    the qemu board's in values (their MACHINEs, their memory plan) that these tests check on
    langdale and scarthgap. So the qemu board's layer stands for them there (the first board
    selected, without it); test_bitbake_options.py runs kv260's layer, every option on, in that
    build on every series."""
    pairs = []
    for s in selected("Q25_BITBAKE_SERIES", SERIES):
        boards = selected("Q25_BITBAKE_BOARDS", BOARDS)
        if not SERIES_INFO[s].xilinx:
            boards = [b for b in boards if b not in MACHINES] or boards[:1]
        pairs += [(s, b) for b in boards]
    return pairs


BSP_MATRIX = _bsp_matrix()


@pytest.fixture(scope="module", params=MATRIX, ids=[f"{s}-{b}" for s, b in MATRIX])
def case(request, ws, builds):
    series, board = request.param
    return series, board, builds[board] / LAYER


@pytest.fixture(scope="module", params=BSP_MATRIX, ids=[f"{s}-{b}" for s, b in BSP_MATRIX])
def bsp_case(request, ws, builds):
    """A (series, board) of BSP_MATRIX: the tests of the "xilinx" build."""
    series, board = request.param
    return series, board, builds[board] / LAYER


def _parse_clean(ws, series, layers, name, layer):
    bd = ws.build(series, layers)
    bd.install(name, layer)
    r = bd.bitbake("-p", label=f"bitbake -p ({name})")
    problems = r.errors() + r.warnings_naming(LAYER) + r.warnings_naming("q25")
    return bd, r, problems


def _assert_parse_is_clean(ws, case, layers):
    series, board, layer = case
    bd, r, problems = _parse_clean(ws, series, layers, board, layer)
    assert r.returncode == 0 and not problems, "\n".join(problems) or r.output[-3000:]
    assert r.parsed() is not None, r.output[-3000:]


def test_parse_is_clean(case, ws):
    """`bitbake -p`: no ERROR, no WARNING about meta-q25, with only the layers meta-q25
    declares (LAYERDEPENDS core)."""
    _assert_parse_is_clean(ws, case, "declared")


def test_parse_is_clean_with_bsp_layers(bsp_case, ws):
    """The same with all of OE-core's recipes, meta-arm and meta-xilinx-core (where the
    snapshot has it)."""
    _assert_parse_is_clean(ws, bsp_case, "xilinx")


def _probe(ws, series, board, layer):
    bd = ws.build(series, "xilinx")
    bd.install(board, layer)
    dt = None
    if board in MACHINES and SERIES_INFO[series].xilinx:  # the device-tree recipe is meta-xilinx-core's
        ms = MACHINES[board]
        dt = {
            "recipe": str(bd.tree / DEVICE_TREE),
            "file": DTSI,
            "strip": board_machines(),
            "cases": {**{m: ["zynqmp", m] for m in ms}, "all": ["zynqmp", *ms], "other": ["zynqmp", "zynqmp-generic"]},
        }
    return bd, bd.probe([ASSETS, RUNTIME, REGIONS, GROUP], VARS, dt, label=f"tinfoil probe ({board})")


def test_recipes_environment(bsp_case, ws):
    """What `bitbake -e` gives for the recipes: licence and checksum against the layer's
    licence file, every SRC_URI file there, PACKAGE_ARCH, FILES."""
    series, board, layer = bsp_case
    bd, ans = _probe(ws, series, board, layer)
    assets, runtime, regions, group = (ans["recipes"][pn] for pn in (ASSETS, RUNTIME, REGIONS, GROUP))
    for info in (assets, runtime, regions):
        assert check_license(info) == [] and check_sources(info) == []
        assert Path(info["vars"]["FILE"]).is_relative_to(bd.layer)
        # S is where the files are unpacked: WORKDIR on langdale and scarthgap, UNPACKDIR
        # (refusing S = WORKDIR) on whinlatter and later; the runtime's, which it compiles, in
        # a subdirectory of it (test_bitbake_build.py: a rebuild with S = WORKDIR aborts in pseudo)
        v = info["vars"]
        assert (v["S"], v["UNPACKDIR"]) == unpacked_s(series, v["WORKDIR"], "q25tok" if info is runtime else "")
    v = assets["vars"]
    model_license = layer / "recipes-q25" / ASSETS / "files" / "MODEL-LICENSE"
    assert v["LICENSE"] == "Apache-2.0" and f"file://MODEL-LICENSE;md5={md5(model_license)}" in v["LIC_FILES_CHKSUM"]
    assert len(assets["src"]) == len(list((layer / "recipes-q25" / ASSETS / "files").iterdir()))
    # one board's memory plan: a MACHINE package for the board's MACHINEs only
    assert v["PACKAGE_ARCH"] == v["MACHINE_ARCH"] == "qemuarm64"
    machines = MACHINES.get(board, ["qemuarm64"])
    assert all(re.match(v["COMPATIBLE_MACHINE"], m) for m in machines)
    assert not any(re.match(v["COMPATIBLE_MACHINE"], m) for ms in MACHINES.values() for m in ms if m not in machines)
    fw = f"{v['nonarch_base_libdir']}/firmware/q25"
    assert f"{fw}/tokenizer.q25tokrt" in assets["install"] and f"{fw}/partitions/region_00.bin" in assets["install"]
    assert (
        check_packaging(
            assets,
            {
                f"{fw}/tokenizer.q25tokrt": ASSETS,
                f"{fw}/partition_map.json": ASSETS,
                f"{v['includedir']}/q25_memory_map.h": f"{ASSETS}-dev",
            },
        )
        == []
    )
    assert not any(p.endswith(".h") and package_of(assets, p) == ASSETS for p in assets["install"])
    # the runtime: the target's tune, the Makefile's installs in the usual packages, no -Werror
    r = runtime["vars"]
    assert r["LICENSE"] == "MIT" and r["PACKAGE_ARCH"] == r["TUNE_PKGARCH"] != r["MACHINE_ARCH"]
    assert (
        check_packaging(
            runtime,
            {
                f"{r['bindir']}/q25tok": RUNTIME,
                f"{r['includedir']}/q25tok.h": f"{RUNTIME}-dev",
                f"{r['libdir']}/libq25tok.a": f"{RUNTIME}-staticdev",
            },
        )
        == []
    )
    # no blanket -Werror of ours; OE-core's own -Werror=format-security (its security flags, in
    # CC on wrynose) is the distro's policy and stays
    assert "WARNFLAGS=-Wall -Wextra" in r["EXTRA_OEMAKE"] and not re.search(r"-Werror(?![=\w-])", r["EXTRA_OEMAKE"])
    g = group["vars"]
    # for another MACHINE the packagegroup is skipped with the assets (yocto-check-layer's world)
    assert g["PACKAGE_ARCH"] == g["MACHINE_ARCH"] and g["COMPATIBLE_MACHINE"] == v["COMPATIBLE_MACHINE"]
    assert set(g["RDEPENDS:packagegroup-q25"].split()) == {ASSETS, RUNTIME, REGIONS}
    # the boot service: its script and unit in its own package, for every architecture
    s = regions["vars"]
    assert s["LICENSE"] == "MIT" and s["PACKAGE_ARCH"] == "all"
    assert (
        check_packaging(
            regions,
            {
                f"{s['sbindir']}/q25-regions": REGIONS,
                f"{s['sysconfdir']}/init.d/q25-regions": REGIONS,
                f"{s['systemd_system_unitdir']}/q25-regions.service": REGIONS,
            },
        )
        == []
    )


def test_license_checksum_by_bitbake(bsp_case, ws):
    """BitBake itself fetches, unpacks and checks the licence checksums (do_populate_lic),
    offline: the layer has no patches, so patch/quilt are assumed provided."""
    series, board, layer = bsp_case
    bd = ws.build(series, "xilinx")
    bd.install(board, layer)
    r = bd.bitbake("-c", "populate_lic", ASSETS, RUNTIME, REGIONS, label=f"do_populate_lic ({board})")
    assert r.returncode == 0 and not r.errors(), r.output[-3000:]
    assert re.search(
        r"Tasks Summary: Attempted \d+ tasks of which \d+ didn't need to be rerun and all succeeded", r.output
    ), r.output[-3000:]
    lic = list((bd.path).glob(f"tmp*/deploy/licenses/**/{ASSETS}/MODEL-LICENSE"))
    assert lic and lic[0].read_bytes() == (layer / "recipes-q25" / ASSETS / "files" / "MODEL-LICENSE").read_bytes()


def test_device_tree_bbappend(bsp_case, ws):
    """meta-xilinx's device-tree recipe gets the fragment exactly once for each of the
    board's MACHINEs (also when a MACHINE carries both names), from this layer, and not for
    another zynqmp MACHINE, through the variable that release of meta-xilinx-core reads."""
    series, board, layer = bsp_case
    bd, ans = _probe(ws, series, board, layer)
    if board not in MACHINES:
        assert not (layer / "dynamic-layers").exists()
        return
    dt = ans["device_tree"]
    ours = str(bd.layer.joinpath(*DT_DIR, "device-tree.bbappend"))
    assert ours in dt["appends"]
    # the list meta-xilinx-core's recipe reads (and adds to SRC_URI): EXTRA_OVERLAYS up to
    # rel-v2024.1 (langdale), EXTRA_DT_INCLUDE_FILES since; the SRC_URI count shows it read it
    var = "EXTRA_OVERLAYS" if series == "langdale" else "EXTRA_DT_INCLUDE_FILES"
    for name, res in dt["cases"].items():
        count = res[var].split().count(DTSI)
        if name == "other":
            assert count == 0 and DTSI not in res["SRC_URI"], res
            continue
        assert count == 1, (name, res)
        assert res["SRC_URI"].split().count(f"file://{DTSI}") == 1, res  # meta-xilinx adds it, once
        assert res["local"] == str(bd.layer.joinpath(*DT_DIR, "files", DTSI))
        assert Path(res["local"]).read_bytes() == layer.joinpath(*DT_DIR, "files", DTSI).read_bytes()


def test_pv_orders_by_release(tmp_path, builds, qwen25_tiny, ws):
    """BitBake's own version comparison (opkg/dnf agree on these forms) orders the assets by
    --layer-release, whatever the content hashes; 1.0+q25.<hash> of older layers sorts lower."""
    from q25deploy.model.synthetic import write_model

    series = selected("Q25_BITBAKE_SERIES", SERIES)[0]
    sys.path.insert(0, str(ws.tree(series) / "bitbake" / "lib"))
    try:
        from bb.utils import vercmp_string
    finally:
        sys.path.pop(0)
    other = tmp_path / "other.gguf"
    write_model(other, "tiny", str(Path(__file__).parents[1] / "data" / "ggml-vocab-qwen2.gguf"), seed=7)
    pvs = {}
    for model in (qwen25_tiny, other):
        for release in (1, 2, 10):
            out = tmp_path / f"{model.stem}-{release}"
            assert (
                main(
                    [
                        "build",
                        "--target",
                        "qemu",
                        "--model",
                        str(model),
                        "--out",
                        str(out),
                        "--layer-release",
                        str(release),
                    ]
                )
                == 0
            )
            [bb] = (out / LAYER / "recipes-q25" / ASSETS).glob("*.bb")
            pvs[model.stem, release] = bb.name[len(ASSETS) + 1 : -3]
    for a in (qwen25_tiny.stem, other.stem):
        for b in (qwen25_tiny.stem, other.stem):
            assert vercmp_string(pvs[a, 2], pvs[b, 1]) > 0 and vercmp_string(pvs[a, 10], pvs[b, 2]) > 0
    assert vercmp_string(pvs[other.stem, 1], "1.0+q25.ffffffffffff") > 0


# -- a broken layer fails the same checks ------------------------------------------------
def _broken(tmp_path, builds, board, edit) -> Path:
    return edited_layer(builds[board], tmp_path, ASSETS, edit)


def test_broken_license_checksum_fails(tmp_path, builds, ws):
    series = selected("Q25_BITBAKE_SERIES", SERIES)[0]
    layer = _broken(tmp_path, builds, "qemu", lambda t: re.sub(r"md5=[0-9a-f]{32}", "md5=" + "0" * 32, t))
    bd = ws.build(series, "xilinx")
    bd.install("broken-md5", layer)
    ans = bd.probe([ASSETS], VARS, label="tinfoil probe (broken md5)")
    assert any("md5" in p for p in check_license(ans["recipes"][ASSETS]))
    r = bd.bitbake("-c", "populate_lic", ASSETS, label="do_populate_lic (broken md5)")
    assert r.returncode != 0 and "LIC_FILES_CHKSUM" in r.output, r.output[-3000:]


def test_broken_files_fails(tmp_path, builds, ws):
    series = selected("Q25_BITBAKE_SERIES", SERIES)[0]
    layer = _broken(tmp_path, builds, "qemu", lambda t: t.replace('FILES:${PN} += "${Q25_INSTALL_DIR}"\n', ""))
    bd = ws.build(series, "xilinx")
    bd.install("broken-files", layer)
    ans = bd.probe([ASSETS], VARS, label="tinfoil probe (missing FILES)")
    problems = check_packaging(ans["recipes"][ASSETS], {})
    assert problems and all("in no package" in p for p in problems)
    assert any("tokenizer.q25tokrt" in p for p in problems)


def test_broken_s_workdir_fails(tmp_path, builds, ws):
    later = [s for s in selected("Q25_BITBAKE_SERIES", SERIES) if s in UNPACK_SUBDIR]
    if not later:
        pytest.skip("S = ${WORKDIR} is allowed before UNPACKDIR: needs whinlatter or wrynose in Q25_BITBAKE_SERIES")
    layer = _broken(tmp_path, builds, "qemu", lambda t: re.sub(r"^S = .*$", 'S = "${WORKDIR}"', t, flags=re.M))
    _, r, problems = _parse_clean(ws, later[0], "declared", "broken-s", layer)
    assert r.returncode != 0 and any("Using S = ${WORKDIR} is no longer supported" in p for p in problems), r.output[
        -3000:
    ]


def test_a_hostile_model_name_parses_as_plain_data(tmp_path, ws):
    """GGUF general.name is model data (issue 10): a name made of a newline and an inline
    Python expression reaches the recipe as text BitBake never evaluates."""
    from q25deploy.model.synthetic import write_model

    series = selected("Q25_BITBAKE_SERIES", SERIES)[0]
    marker = tmp_path / "evaluated"  # created only if BitBake ran the model's Python
    hostile = tmp_path / "hostile.gguf"
    name = f'q\n${{@bb.utils.mkdirhier("{marker}")}}"\\'
    write_model(hostile, "tiny", str(Path(__file__).parents[1] / "data" / "ggml-vocab-qwen2.gguf"), name=name)
    out = tmp_path / "build"
    assert main(["build", "--target", "qemu", "--model", str(hostile), "--out", str(out)]) == 0
    bd = ws.build(series, "declared")
    bd.install("hostile-name", out / LAYER)
    r = bd.bitbake("-p", label="bitbake -p (hostile model name)")
    assert r.returncode == 0 and not r.errors(), r.output[-3000:]
    ans = bd.probe([ASSETS], VARS + ["SUMMARY"], label="tinfoil probe (hostile model name)")
    summary = ans["recipes"][ASSETS]["vars"]["SUMMARY"]
    assert summary.endswith(f"q__{{@bb.utils.mkdirhier(_{marker}_)}}__"), summary
    assert not marker.exists()
