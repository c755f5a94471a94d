"""Real BitBake builds the layer's four recipes through compile, install, package, QA and
do_package_write_deb (tests/yocto.py's "package" builds: OE-core + meta-arm + meta-xilinx-core,
Debian's aarch64 cross toolchain as meta-arm-toolchain's external toolchain,
tests/yocto_toolchain.py), on every series CI builds (tests/yocto.py's SERIES_INFO: scarthgap
the qemu board's and kv260's layers, langdale kv260's, wrynose the qemu board's), with
OE-core's default ERROR_QA/WARN_QA: no ERROR and no WARNING. The qemu board builds with MACHINE
qemuarm64 (with the boards' MACHINE names as overrides, as in test_bitbake.py); kv260 with the
MACHINE its users build on that series: on scarthgap meta-kria's k26-smk-kv-sdt (on
meta-xilinx-core's zynqmp-ev-generic.conf), on langdale PetaLinux 2024.1's xilinx-k26-kv (on
meta-xilinx-core rel-v2024.1's zynqmp-generic.conf, SoC variant EV), each from a stand-in
(tests/data/yocto/meta-kria-stand-in), so its tune, MACHINE_ARCH and SoC overrides are a Zynq
UltraScale+ EV machine's. Then the packages
themselves are the test: package arch directories, file lists, dependencies (``dpkg-deb``),
q25tok built with the toolchain's flags (GNU_HASH, OE's dynamic linker from LDFLAGS, debug
info split into -dbg, no build path), the boot service's systemd registration; and a recipe
that strips q25tok itself fails QA.

``Q25_BITBAKE_SERIES`` and ``Q25_BITBAKE_BOARDS`` narrow the (series, board) pairs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from requirements import need_program
from yocto import PACKAGE, RECIPES, SERIES_INFO, board_machines, built_pairs, edited_layer, package_machine

RUNTIME, ASSETS, REGIONS, GROUP = RECIPES
PAIRS = built_pairs()
# per (series, board): MACHINE, its MACHINE_ARCH (the deploy directory of MACHINE packages) and
# the tune's package arch (TUNE_PKGARCH: the deploy directory of compiled packages)
# OE-core's qemuarm64.conf: DEFAULTTUNE cortexa57; meta-xilinx-core's soc-zynqmp.inc:
# DEFAULTTUNE cortexa72-cortexa53 (one package arch for ZynqMP's Cortex-A53 and Versal's
# Cortex-A72), kept by zynqmp-generic.conf and zynqmp-ev-generic.conf
MACHINES = {
    **{(s, "qemu"): ("qemuarm64", "qemuarm64", "cortexa57") for s in SERIES_INFO},
    ("scarthgap", "kv260"): ("k26-smk-kv-sdt", "k26_smk_kv_sdt", "cortexa72-cortexa53"),
    ("langdale", "kv260"): ("xilinx-k26-kv", "xilinx_k26_kv", "cortexa72-cortexa53"),
}
# where /lib is: INIT_MANAGER systemd brings usrmerge since mickledore (not on langdale)
LIB = {"langdale": "/lib"}


def _lib(series: str) -> str:
    return LIB.get(series, "/usr/lib")


# kv260's SoC overrides (meta-xilinx-core's machines, OE-core's tune) and Kria overrides (meta-kria's,
# or PetaLinux's for its old BOARD value) per series
KV260_OVERRIDES = {
    "scarthgap": (
        ["zynqmp", "zynqmp-generic", "zynqmp-ev-generic", "cortexa72-cortexa53"],
        ["kria", "k26-kria", "k26-smk"],
    ),
    "langdale": (
        ["zynqmp", "zynqmp-ev", "zynqmp-generic", "cortexa72-cortexa53"],
        ["kria", "k26-kria", "k26-smk", "k26-kv"],
    ),
}
MACHINE_VARS = ["MACHINE", "MACHINE_ARCH", "TUNE_PKGARCH", "DEFAULTTUNE", "MACHINEOVERRIDES", "SOC_FAMILY"]
MACHINE_VARS += ["MACHINE_FEATURES", "PACKAGE_ARCH", "TARGET_PREFIX", "TUNE_CCARGS"]


def _build(ws, series: str, layer: Path, name: str, *targets: str):
    bd = ws.build(series, PACKAGE)
    bd.install(name, layer)
    return bd, bd.bitbake(*targets, label=f"bitbake {' '.join(targets)} ({name})")


def _deb(deploy: Path, pkg: str) -> Path:
    found = [p for p in deploy.rglob(f"{pkg}_*.deb")]
    assert len(found) == 1, (pkg, found)
    return found[0]


def _control(deb: Path) -> dict[str, str]:
    out = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"^(\S+): (.*)$", out, re.M))


def _files(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1].lstrip(".") for ln in out.splitlines() if not ln.startswith("d")}


def _depends(deb: Path) -> set[str]:
    dep = _control(deb).get("Depends", "")
    return {d.split()[0] for d in dep.split(",") if d.strip()}


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{s}-{b}" for s, b in PAIRS])
def built(request, bitbake_packages):
    series, board = request.param
    pkgs = bitbake_packages(series, board)
    return (series, board), pkgs.bd, pkgs.debs


def test_packages_and_files(built, tmp_path):
    """Each recipe's files in the package the layer says, nothing else shipped."""
    (series, board), bd, deploy = built
    fw = f"{_lib(series)}/firmware/q25"  # nonarch_base_libdir
    runtime = _files(_deb(deploy, RUNTIME))
    assert runtime == {"/usr/bin/q25tok"}, runtime
    assert "/usr/include/q25tok.h" in _files(_deb(deploy, f"{RUNTIME}-dev"))
    assert _files(_deb(deploy, f"{RUNTIME}-staticdev")) == {"/usr/lib/libq25tok.a"}
    assert "/usr/bin/.debug/q25tok" in _files(_deb(deploy, f"{RUNTIME}-dbg"))
    assets = _files(_deb(deploy, ASSETS))
    assert {f"{fw}/tokenizer.q25tokrt", f"{fw}/partition_map.json", f"{fw}/partitions/region_00.bin"} <= assets
    assert not any(p.endswith(".h") for p in assets)
    assert "/usr/include/q25_memory_map.h" in _files(_deb(deploy, f"{ASSETS}-dev"))
    regions = _files(_deb(deploy, REGIONS))
    assert {"/usr/sbin/q25-regions", f"{_lib(series)}/systemd/system/q25-regions.service"} <= regions, regions
    # the assets are one board's memory plan: a MACHINE package (the qemu board's build is
    # qemuarm64, kv260's its own MACHINE: tests/yocto.py); q25tok is the tune's
    _, machine_arch, tune_arch = MACHINES[series, board]
    dirs = {pkg: _deb(deploy, pkg).parent.name for pkg in RECIPES}
    print(f"\n{series}/{board}: package arch directories {dirs}")
    assert dirs[ASSETS] == dirs[GROUP] == machine_arch, dirs
    assert dirs[RUNTIME] == tune_arch, dirs
    assert dirs[RUNTIME] not in (machine_arch, "all")
    assert dirs[REGIONS] == "all"
    assert _control(_deb(deploy, RUNTIME))["Architecture"] == "arm64"
    assert _control(_deb(deploy, ASSETS))["Architecture"] == _control(_deb(deploy, GROUP))["Architecture"] == "arm64"


def test_the_machine_configuration(built):
    """What BitBake built with: qemuarm64 with every board's MACHINE names as overrides for the
    qemu board; for kv260 the MACHINE of that series' users (one of the board file's
    yocto_machine), a ZynqMP EV machine of meta-xilinx-core's (SoC family, overrides, tune,
    Mali-400 and VCU features) with the Kria overrides, and no qemuarm64 in it; Debian's triplet
    and the tune's -mcpu."""
    (series, board), bd, _ = built
    machine, machine_arch, tune_arch = MACHINES[series, board]
    ans = bd.probe([RUNTIME, ASSETS], MACHINE_VARS, label=f"tinfoil probe (MACHINE of {board})")
    v = ans["recipes"][RUNTIME]["vars"]
    overrides = v["MACHINEOVERRIDES"].split(":")
    print(f"\n{series}/{board}: " + ", ".join(f"{k} {v[k]}" for k in MACHINE_VARS if k != "PACKAGE_ARCH"))
    assert (v["MACHINE"], v["MACHINE_ARCH"], v["TUNE_PKGARCH"]) == (machine, machine_arch, tune_arch), v
    assert v["PACKAGE_ARCH"] == tune_arch
    assert ans["recipes"][ASSETS]["vars"]["PACKAGE_ARCH"] == machine_arch
    assert v["TARGET_PREFIX"] == "aarch64-linux-gnu-", v  # meta-arm's tcmode found Debian's triplet
    if board == "qemu":
        assert "qemuarm64" in overrides and set(board_machines()) <= set(overrides), overrides
        return
    assert machine == package_machine(series, board)
    assert v["SOC_FAMILY"] == "zynqmp" and v["DEFAULTTUNE"] == tune_arch, v
    # the tune's TUNE_FEATURES "aarch64 crc cortexa72-cortexa53", and q25tok compiled with it
    # by Debian's gcc (the recipe's compile log)
    # (langdale's tune says "-mcpu=cortex-a72.cortex-a53 -march=armv8-a+crc")
    args = v["TUNE_CCARGS"].split()
    assert any(a.startswith("-mcpu=cortex-a72.cortex-a53") for a in args) and any(a.endswith("+crc") for a in args), (
        args
    )
    [log] = bd.path.glob(f"tmp*/work/{tune_arch}-*-linux/{RUNTIME}/*/temp/log.do_compile")
    assert f"{v['TARGET_PREFIX']}gcc {v['TUNE_CCARGS'].strip()}" in " ".join(log.read_text().split()), log
    soc, kria = KV260_OVERRIDES[series]
    assert set(soc + kria + [machine]) <= set(overrides), overrides
    others = {m for (_, b), (m, _, _) in MACHINES.items() if m != machine}  # qemuarm64, the other kv260 machine
    assert not ({"qemuall"} | others) & set(overrides), overrides
    assert {"mali400", "vcu", "fpga-overlay"} <= set(v["MACHINE_FEATURES"].split()), v["MACHINE_FEATURES"]


def test_dependencies(built):
    """dpkg's Depends: q25tok on the C library (shlibs), the boot service on q25tok, the
    packagegroup on all three."""
    _, _, deploy = built
    assert _depends(_deb(deploy, RUNTIME)) == {"libc6"}  # shlibs: the external toolchain's glibc, Debian-named
    assert RUNTIME in _depends(_deb(deploy, REGIONS))
    assert {RUNTIME, ASSETS, REGIONS} <= _depends(_deb(deploy, GROUP))


def test_q25tok_built_with_the_toolchain_flags(built, tmp_path):
    """GNU_HASH, OE's dynamic linker (the tcmode's TARGET_LDFLAGS: LDFLAGS reached the link, as
    the compile log shows; with usrmerge Debian's default /lib/ld-linux-aarch64.so.1 would be
    wrong), the debug info split into -dbg behind a debuglink, no build path in either; and it
    runs (qemu-aarch64, Debian's arm64 libc)."""
    (series, _), bd, deploy = built
    linker = f"{_lib(series)}/ld-linux-aarch64.so.1"
    [log] = bd.path.glob(f"tmp*/work/*/{RUNTIME}/*/temp/log.do_compile")
    compile_log = " ".join(log.read_text().split())
    assert "-Wl,--as-needed" in compile_log, log  # OE's TARGET_LDFLAGS (not Debian's default) reached make
    if series != "langdale":  # meta-arm's tcmode names OE's dynamic linker since mickledore
        assert f"-Wl,--dynamic-linker={linker}" in compile_log, log
    need_program("readelf", "Debian: binutils")
    root = tmp_path / "root"
    for pkg in (RUNTIME, f"{RUNTIME}-dbg"):
        subprocess.run(["dpkg-deb", "-x", str(_deb(deploy, pkg)), str(root)], check=True)
    q25tok = root / "usr" / "bin" / "q25tok"
    dyn = subprocess.run(["readelf", "-d", str(q25tok)], capture_output=True, text=True, check=True).stdout
    assert "(GNU_HASH)" in dyn and "(HASH)" not in dyn and "libc.so.6" in dyn, dyn
    head = subprocess.run(["readelf", "-lS", str(q25tok)], capture_output=True, text=True, check=True).stdout
    assert f"interpreter: {linker}]" in head, head
    assert ".gnu_debuglink" in head and ".debug_info" not in head, head
    debug = root / "usr" / "bin" / ".debug" / "q25tok"
    sections = subprocess.run(["readelf", "-S", str(debug)], capture_output=True, text=True, check=True).stdout
    assert ".debug_info" in sections
    for f in (q25tok, debug):
        assert str(bd.path).encode() not in f.read_bytes() and str(bd.tree).encode() not in f.read_bytes(), f
    qemu = need_program("qemu-aarch64", "Debian: qemu-user")
    lib = "/usr/aarch64-linux-gnu/lib"
    r = subprocess.run(
        [qemu, f"{lib}/ld-linux-aarch64.so.1", "--library-path", lib, str(q25tok), "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "q25tok encode" in r.stdout + r.stderr, r


def test_boot_service_registered_for_systemd(built, tmp_path):
    """The boot service's package enables its unit on install (systemd's postinst) and its
    unit starts the package's script."""
    (series, _), _, deploy = built
    deb = _deb(deploy, REGIONS)
    ctl = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(ctl)], check=True)
    postinst = (ctl / "postinst").read_text()
    assert re.search(r"systemctl .*enable .*q25-regions\.service", postinst) or (
        "q25-regions.service" in postinst and "enable" in postinst
    ), postinst
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    unit = (root / _lib(series).lstrip("/") / "systemd" / "system" / "q25-regions.service").read_text()
    assert re.search(r"^ExecStart=/usr/sbin/q25-regions start$", unit, re.M), unit
    assert not (root / "etc" / "init.d").exists()  # no sysvinit in this DISTRO (docs/contributing.md#bitbake)


def test_a_stripping_recipe_fails_qa(ws, builds, tmp_path):
    """QA is on, at its defaults: a runtime recipe that strips q25tok itself fails do_package
    (already-stripped), so the debug split above is BitBake's, not luck (the first series
    that builds the qemu board's layer)."""
    series = next((s for s, b in PAIRS if b == "qemu"), None)
    if series is None:
        pytest.skip("needs a series that builds the qemu board's layer in Q25_BITBAKE_SERIES/BOARDS")
    layer = _runtime_layer(
        builds,
        tmp_path,
        "stripping",
        lambda t: t.replace(
            "oe_runmake install 'DESTDIR=${D}'", "oe_runmake install 'DESTDIR=${D}'\n    ${STRIP} ${D}${bindir}/q25tok"
        ),
    )
    _, r = _build(ws, series, layer, "stripping", "-c", "package_qa", RUNTIME)
    assert r.returncode != 0 and "[already-stripped]" in r.output, r.output[-3000:]


def _runtime_layer(builds, tmp_path: Path, name: str, edit) -> Path:
    return edited_layer(builds["qemu"], tmp_path / name, RUNTIME, edit)
