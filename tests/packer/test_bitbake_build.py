"""Real BitBake builds the layer's four recipes through compile, install, package, QA and
do_package_write_deb (tests/yocto.py's "package" build: OE-core + meta-arm + meta-xilinx-core,
Debian's aarch64 cross toolchain as meta-arm-toolchain's external toolchain,
tests/yocto_toolchain.py), for the qemu board's and kv260's layers, with
OE-core's default ERROR_QA/WARN_QA (one configuration: MACHINE qemuarm64 with the boards'
MACHINE names as overrides, as in test_bitbake.py, so kv260's COMPATIBLE_MACHINE recipes build): no ERROR and no WARNING. Then the packages themselves are
the test: file lists, dependencies (``dpkg-deb``), q25tok built with the toolchain's flags
(GNU_HASH, OE's dynamic linker from LDFLAGS, debug info split into -dbg, no build path), the
boot service's systemd registration; and a recipe that strips q25tok itself fails QA.

Only the first series of ``Q25_BITBAKE_SERIES`` (scarthgap first); ``Q25_BITBAKE_BOARDS``
narrows the boards (qemu, kv260)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from requirements import need_program
from yocto import LAYER, PACKAGE, SERIES, edited_layer, selected

RUNTIME, ASSETS, REGIONS, GROUP = "q25-tokenizer-runtime", "q25-model-assets", "q25-regions", "packagegroup-q25"
RECIPES = (RUNTIME, ASSETS, REGIONS, GROUP)
BOARDS = [b for b in selected("Q25_BITBAKE_BOARDS", ("qemu", "kv260")) if b in ("qemu", "kv260")]


def _series() -> str:
    return selected("Q25_BITBAKE_SERIES", SERIES)[0]


def _build(ws, layer: Path, name: str, *targets: str):
    bd = ws.build(_series(), PACKAGE)
    bd.install(name, layer)
    return bd, bd.bitbake(*targets, label=f"bitbake {' '.join(targets)} ({name})")


def _deploy(bd) -> Path:
    return next(bd.path.glob("tmp*/deploy/deb"))


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


@pytest.fixture(scope="module", params=BOARDS)
def built(request, ws, builds):
    need_program("dpkg-deb", "Debian: dpkg")
    board = request.param
    bd, r = _build(ws, builds[board] / LAYER, board, *RECIPES)
    problems = r.errors() + [ln for ln in r.output.splitlines() if ln.startswith("WARNING")]
    assert r.returncode == 0 and not problems, "\n".join(problems) or r.output[-4000:]
    assert re.search(
        r"Tasks Summary: Attempted \d+ tasks of which \d+ didn't need to be rerun and all succeeded", r.output
    )
    return board, bd, _deploy(bd)


def test_packages_and_files(built, tmp_path):
    """Each recipe's files in the package the layer says, nothing else shipped."""
    board, bd, deploy = built
    fw = "/usr/lib/firmware/q25"  # nonarch_base_libdir: INIT_MANAGER systemd brings usrmerge
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
    assert {"/usr/sbin/q25-regions", "/usr/lib/systemd/system/q25-regions.service"} <= regions, regions
    # the assets are one board's memory plan: a MACHINE package (the build's MACHINE is
    # qemuarm64, with kv260's MACHINE names as overrides: tests/yocto.py)
    assert _deb(deploy, ASSETS).parent.name == _deb(deploy, GROUP).parent.name == "qemuarm64"
    assert _deb(deploy, RUNTIME).parent.name not in ("qemuarm64", "all")  # the tune's
    assert _deb(deploy, REGIONS).parent.name == "all"
    assert _control(_deb(deploy, RUNTIME))["Architecture"] == "arm64"


def test_dependencies(built):
    """dpkg's Depends: q25tok on the C library (shlibs), the boot service on q25tok, the
    packagegroup on all three."""
    _, _, deploy = built
    assert _depends(_deb(deploy, RUNTIME)) == {"libc6"}  # shlibs: the external toolchain's glibc, Debian-named
    assert RUNTIME in _depends(_deb(deploy, REGIONS))
    assert {RUNTIME, ASSETS, REGIONS} <= _depends(_deb(deploy, GROUP))


def test_q25tok_built_with_the_toolchain_flags(built, tmp_path):
    """GNU_HASH, OE's dynamic linker (the tcmode's TARGET_LDFLAGS: LDFLAGS reached the link;
    Debian's default is /lib/ld-linux-aarch64.so.1), the debug info split into -dbg behind a
    debuglink, no build path in either; and it runs (qemu-aarch64, Debian's arm64 libc)."""
    _, bd, deploy = built
    need_program("readelf", "Debian: binutils")
    root = tmp_path / "root"
    for pkg in (RUNTIME, f"{RUNTIME}-dbg"):
        subprocess.run(["dpkg-deb", "-x", str(_deb(deploy, pkg)), str(root)], check=True)
    q25tok = root / "usr" / "bin" / "q25tok"
    dyn = subprocess.run(["readelf", "-d", str(q25tok)], capture_output=True, text=True, check=True).stdout
    assert "(GNU_HASH)" in dyn and "(HASH)" not in dyn and "libc.so.6" in dyn, dyn
    head = subprocess.run(["readelf", "-lS", str(q25tok)], capture_output=True, text=True, check=True).stdout
    assert "interpreter: /usr/lib/ld-linux-aarch64.so.1]" in head, head  # INIT_MANAGER systemd: usrmerge
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
    _, _, deploy = built
    deb = _deb(deploy, REGIONS)
    ctl = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(ctl)], check=True)
    postinst = (ctl / "postinst").read_text()
    assert re.search(r"systemctl .*enable .*q25-regions\.service", postinst) or (
        "q25-regions.service" in postinst and "enable" in postinst
    ), postinst
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    unit = (root / "usr" / "lib" / "systemd" / "system" / "q25-regions.service").read_text()
    assert re.search(r"^ExecStart=/usr/sbin/q25-regions start$", unit, re.M), unit
    assert not (root / "etc" / "init.d").exists()  # no sysvinit in this DISTRO (docs/yocto.md)


def test_a_stripping_recipe_fails_qa(ws, builds, tmp_path):
    """QA is on, at its defaults: a runtime recipe that strips q25tok itself fails do_package
    (already-stripped), so the debug split above is BitBake's, not luck."""
    layer = _runtime_layer(
        builds,
        tmp_path,
        "stripping",
        lambda t: t.replace(
            "oe_runmake install 'DESTDIR=${D}'", "oe_runmake install 'DESTDIR=${D}'\n    ${STRIP} ${D}${bindir}/q25tok"
        ),
    )
    _, r = _build(ws, layer, "stripping", "-c", "package_qa", RUNTIME)
    assert r.returncode != 0 and "[already-stripped]" in r.output, r.output[-3000:]


def _runtime_layer(builds, tmp_path: Path, name: str, edit) -> Path:
    return edited_layer(builds["qemu"], tmp_path / name, RUNTIME, edit)
