"""Debian's aarch64 cross toolchain as meta-arm-toolchain's external toolchain, for the
BitBake build tests (tests/packer/test_bitbake_build.py): a directory laid out as
``external-arm-toolchain.bb`` and ``tcmode-external-arm.inc`` read it (``EXTERNAL_TOOLCHAIN``,
triplet ``aarch64-linux-gnu``), assembled from the installed Debian packages
(gcc/g++-aarch64-linux-gnu, libc6-dev-arm64-cross) and glibc's own tools from Debian's
``libc-bin:arm64`` (``ldd``, ``tzselect``, ``ldconfig``, ``iconvconfig``: the recipe installs
them; ``apt-get download``, cached like the emulated board's packages). Never downloaded from
anywhere else.

    EXTERNAL_TOOLCHAIN/
      bin/aarch64-linux-gnu-*                 -> /usr/bin/aarch64-linux-gnu-* (symlinks)
      aarch64-linux-gnu/lib64/                gcc's runtime libraries (libgcc_s, libstdc++, ...)
      aarch64-linux-gnu/include/              libstdc++'s headers
      aarch64-linux-gnu/libc/lib64/           glibc's shared objects (and lib/ld-linux-aarch64.so.1)
      aarch64-linux-gnu/libc/usr/lib64/       glibc's crt files, archives and linker scripts
      aarch64-linux-gnu/libc/usr/include/     glibc's and Linux's headers
      aarch64-linux-gnu/libc/{usr/bin,usr/sbin,sbin,usr/share}/  glibc's tools (libc-bin:arm64)
      lib/gcc/aarch64-linux-gnu/<gcc -dumpfullversion>/  crt*.o, libgcc*, libgcov*, include/

Debian's linker scripts name ``/usr/aarch64-linux-gnu/lib/...``; here they name the bare
file names, which ld finds in the recipe sysroot's library directories.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

TRIPLET = "aarch64-linux-gnu"
CROSS = Path("/usr") / TRIPLET
GCC_CROSS = Path("/usr/lib/gcc-cross") / TRIPLET
LIBC_PACKAGES = ("libc6-arm64-cross", "libc6-dev-arm64-cross", "linux-libc-dev-arm64-cross")
LIBC_BIN = "libc-bin:arm64"
HOW = "Debian: gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross (in .ci/run)"

# meta-arm reads the toolchain's release from Arm's version banner ("... (Arm GNU Toolchain
# 13.2.Rel1)") and glibc's from `ldd --version`'s third word; Debian's gcc says "gcc version
# 12.2.0 (Debian 12.2.0-14)" and its ldd "ldd (Debian GLIBC 2.36-9+deb12u14) 2.36". The
# same TCMODE with the two probes reading Debian's banners (the last definition wins).
TCMODE = "debian-cross"
TCMODE_INC = """\
# Debian's aarch64-linux-gnu cross toolchain through meta-arm-toolchain's external-arm mode
# (q25deploy tests: tests/yocto_toolchain.py)
require conf/distro/include/tcmode-external-arm.inc

def eat_get_main_version(d):
    return eat_get_gcc_version(d)

def eat_get_libc_version(d):
    import bb.process
    ldd = d.expand('${EXTERNAL_TOOLCHAIN}/${EAT_TARGET_SYS}/libc/usr/bin/ldd')
    stdout, _ = bb.process.run(['/bin/sh', ldd, '--version'])
    return stdout.splitlines()[0].split()[-1]
"""

# OE-core since whinlatter chooses the target's compiler through a toolchain class
# (PREFERRED_TOOLCHAIN_TARGET, classes/toolchain/*.bbclass) and names the cross tools
# virtual/cross-cc, virtual/cross-c++, virtual/cross-binutils, virtual/compilerlibs;
# meta-arm-toolchain dropped its external Linux toolchain before that, so these series build
# with scarthgap's (tests/yocto.py) and this: tests/data/yocto/meta-debian-host's
# toolchain/debian-cross class (gcc's tool names, the external toolchain as provider) and its
# external-arm-toolchain.bbappend (which provides the new names)
TCMODE_TOOLCHAIN_CLASSES = """
# OE-core's toolchain classes (whinlatter and later): the target's gcc is the external one
PREFERRED_TOOLCHAIN_TARGET = "debian-cross"
PREFERRED_PROVIDER_virtual/cross-binutils = "external-arm-toolchain"
PREFERRED_PROVIDER_virtual/nativesdk-cross-binutils ?= "binutils-crosssdk-${SDK_SYS}"
# tcmode-external-arm.inc's name of the compiler libraries: for native recipes (no
# TARGET_PREFIX) the same key as toolchain/gcc.bbclass's, which names OE-core's gcc-runtime
unset PREFERRED_PROVIDER_virtual/${TARGET_PREFIX}compilerlibs
"""


def tcmode_inc(oe_core: Path) -> str:
    """The TCMODE include for the OE-core tree at ``oe_core``: TCMODE_INC, and
    TCMODE_TOOLCHAIN_CLASSES where OE-core has toolchain classes."""
    classes = (oe_core / "meta" / "classes" / "toolchain" / "gcc.bbclass").is_file()
    return TCMODE_INC + (TCMODE_TOOLCHAIN_CLASSES if classes else "")


def _files_of(package: str) -> list[Path]:
    out = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout
    return [Path(p) for p in out.splitlines() if p.startswith(str(CROSS) + "/") and not Path(p).is_dir()]


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink() and not Path(src.readlink()).is_absolute():
        dst.unlink(missing_ok=True)
        dst.symlink_to(src.readlink())
    else:
        shutil.copy2(src, dst)


def _linker_script(path: Path) -> bool:
    head = path.read_bytes()[:64]
    return b"\0" not in head and b"GNU ld script" in head


def gcc_version() -> str:
    return subprocess.run(
        [f"{TRIPLET}-gcc", "-dumpfullversion"], capture_output=True, text=True, check=True
    ).stdout.strip()


def assemble(dest: Path, libc_bin_deb: Path) -> Path:
    """The EXTERNAL_TOOLCHAIN directory at ``dest`` (rebuilt from scratch)."""
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "bin").mkdir(parents=True)
    for tool in sorted(Path("/usr/bin").glob(f"{TRIPLET}-*")):
        (dest / "bin" / tool.name).symlink_to(tool)
    sysdir = dest / TRIPLET
    libc = {p for pkg in LIBC_PACKAGES for p in _files_of(pkg)}
    for p in sorted(libc):
        rel = p.relative_to(CROSS)
        if rel.parts[:3] == ("include", "finclude", TRIPLET):  # Debian's multiarch path; glibc's own:
            _copy(p, sysdir / "libc" / "usr" / "include" / "finclude" / p.name)
        elif rel.parts[0] == "include":
            _copy(p, sysdir / "libc" / "usr" / rel)
        elif re.search(r"\.so\.\d", p.name):  # shared objects (and the dynamic linker)
            _copy(p, sysdir / "libc" / "lib64" / p.name)
            if p.name.startswith("ld-linux"):
                _copy(p, sysdir / "libc" / "lib" / p.name)
        else:
            _copy(p, sysdir / "libc" / "usr" / "lib64" / p.name)
    for p in sorted((CROSS / "lib").iterdir()):
        if p not in libc and not p.is_dir():
            _copy(p, sysdir / "lib64" / p.name)
    for p in sorted((CROSS / "include").rglob("*")):
        if p not in libc and not p.is_dir():
            _copy(p, sysdir / "include" / p.relative_to(CROSS / "include"))
    for script in (sysdir / "libc" / "usr" / "lib64").iterdir():
        if script.is_file() and not script.is_symlink() and _linker_script(script):
            text = script.read_text()
            script.write_text(text.replace(f"/usr/{TRIPLET}/lib/", ""))
    unpacked = dest / "libc-bin"
    subprocess.run(["dpkg-deb", "-x", str(libc_bin_deb), str(unpacked)], check=True)
    # glibc's programs and their manual pages and copyright (Debian's own files, lintian's
    # overrides and nsswitch.conf template, are no part of glibc's install)
    for part in ("usr/bin", "usr/sbin", "sbin", "usr/share/man", "usr/share/doc"):
        shutil.copytree(unpacked / part, sysdir / "libc" / part, symlinks=True)
    shutil.rmtree(unpacked)
    gcc = GCC_CROSS / gcc_version().split(".")[0]
    gccdir = dest / "lib" / "gcc" / TRIPLET / gcc_version()
    for p in sorted(gcc.iterdir()):
        if p.is_file() and re.match(r"crt.*\.o$|libgcc|libgcov", p.name):
            _copy(p, gccdir / p.name)
    shutil.copytree(gcc / "include", gccdir / "include", symlinks=True)
    (gccdir / "finclude").mkdir()  # Fortran modules: none, Debian's gfortran is not installed
    return dest


def libc_bin_deb(cache: Path) -> Path:
    """Debian's libc-bin:arm64 (glibc's ldd, tzselect, ldconfig, ...), fetched once."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob("libc-bin_*_arm64.deb"))
    if not found:
        subprocess.run(["apt-get", "download", LIBC_BIN], cwd=cache, check=True, capture_output=True)
        found = sorted(cache.glob("libc-bin_*_arm64.deb"))
    return found[-1]


HOST_LAYER = Path(__file__).with_name("data") / "yocto" / "meta-debian-host"
# Debian host programs the packaging tasks call where OE would build -native ones
HOST_PROGRAMS = {
    "pseudo": "Debian: pseudo",
    "/usr/lib/rpm/rpmdeps": "Debian: rpm",
    "dpkg-deb": "Debian: dpkg",
    f"{TRIPLET}-g++": HOW,
}


# what Debian's pseudo (1.9) must leave alone where OE-core names only what it tracks
# (PSEUDO_INCLUDE_PATHS, whinlatter and later, for OE's newer pseudo): the directories OE-core
# listed in PSEUDO_IGNORE_PATHS before; else hardlinked pkgdata and sysroot files abort
# pseudo ("path mismatch")
PSEUDO_IGNORED = (
    "/usr/,/etc/,/lib,/dev/,/run/,${T},${WORKDIR}/recipe-sysroot,${SSTATE_DIR},${STAMPS_DIR},"
    "${TMPDIR}/sstate-control,${TMPDIR}/buildstats,${TMPDIR}/sysroots-components,${TMPDIR}/pkgdata,"
    "${WORKDIR}/deploy-,${WORKDIR}/sstate-build-package_,${WORKDIR}/sstate-install-package_,"
    "${WORKDIR}/pkgdata-sysroot,${DEPLOY_DIR},${TOPDIR}/cache,${COREBASE}/scripts,"
    # the unpacked sources, which OE-core's include list leaves out too: do_package hardlinks
    # them into the -src package's tree, and a rerun do_install (after a recipe change) then
    # aborted pseudo ("path mismatch", test_a_stripping_recipe_fails_qa on wrynose)
    "${UNPACKDIR}"
)


def local_conf(toolchain: Path, oe_core: Path) -> list[str]:
    """local.conf lines of the packaging build with the OE-core tree at ``oe_core``: the
    smallest set of host tools in place of -native recipes whose sources cannot be fetched
    offline, each with why."""
    include_paths = "PSEUDO_INCLUDE_PATHS" in (oe_core / "meta" / "conf" / "bitbake.conf").read_text()
    pseudo = (
        [
            "# OE-core tells pseudo what to track (PSEUDO_INCLUDE_PATHS), which Debian's pseudo 1.9 does",
            "# not read: it gets the older list of what to leave alone (tests/yocto_toolchain.py)",
            f'PSEUDO_IGNORE_PATHS = "{PSEUDO_IGNORED}"',
            "FAKEROOTBASEENV:append = \" PSEUDO_IGNORE_PATHS=${@oe.path.canonicalize(d.getVar('PSEUDO_IGNORE_PATHS'))}\"",
            "FAKEROOTENV:append = \" PSEUDO_IGNORE_PATHS=${@oe.path.canonicalize(d.getVar('PSEUDO_IGNORE_PATHS'))}\"",
            'BB_BASEHASH_IGNORE_VARS:append = " PSEUDO_IGNORE_PATHS"',
        ]
        if include_paths
        else []
    )
    return pseudo + [
        f'TCMODE = "{TCMODE}"',
        f'EXTERNAL_TOOLCHAIN = "{toolchain}"',
        "# meta-arm's tcmode drops ldflags from ERROR_QA (an external toolchain may lack GNU_HASH):",
        "# it stays a check here, as a warning the tests fail on",
        'WARN_QA:append = " ldflags"',
        "# Debian's cross libraries and glibc programs come stripped (their debug info is in Debian's",
        "# -dbgsym packages): the toolchain recipe's packaging neither strips nor splits them again",
        'INHIBIT_PACKAGE_STRIP:pn-external-arm-toolchain = "1"',
        'INHIBIT_PACKAGE_DEBUG_SPLIT:pn-external-arm-toolchain = "1"',
        'PACKAGE_CLASSES = "package_deb"',
        "# Debian's dpkg-deb writes the packages (dpkg-native: sources not fetchable offline)",
        'ASSUME_PROVIDED += "dpkg-native"',
        'HOSTTOOLS += "dpkg-deb"',
        "# Debian's pseudo (1.9) runs the fakeroot tasks: tests/data/yocto/meta-debian-host's",
        "# host-pseudo-native stages it where FAKEROOTCMD looks (pseudo-native: git source)",
        'ASSUME_PROVIDED += "pseudo-native"',
        'PREFERRED_PROVIDER_virtual/fakeroot-native = "host-pseudo-native"',
        'PSEUDO_SYSROOT = "${COMPONENTS_DIR}/${BUILD_ARCH}/host-pseudo-native"',
        "# per-file dependencies (do_package's rpmdeps): Debian's rpm (rpm-native: sources not fetchable)",
        'ASSUME_PROVIDED += "rpm-native"',
        "RPMDEPS:forcevariable = \"/usr/lib/rpm/rpmdeps --alldeps --define '__font_provides %{nil}'\"",
        "# dwarfsrcfiles-native is built from OE-core's own source against Debian's libdw (libdw-dev)",
        'ASSUME_PROVIDED += "elfutils-native"',
        "# the host's file (in HOSTTOOLS) identifies ELF files (file-native: sources not fetchable)",
        'ASSUME_PROVIDED += "file-native"',
        "# the boot service's systemd registration (systemd-systemctl-native is OE-core's own script);",
        "# sysvinit's needs the update-rc.d recipe, whose git source cannot be fetched (docs/contributing.md)",
        'INIT_MANAGER = "systemd"',
        "# update-rc.d.bbclass's PACKAGE_WRITE_DEPS: the tool runs only in do_rootfs's offline",
        "# postinsts (no rootfs here; without sysvinit the boot service's postinst does not call it)",
        'ASSUME_PROVIDED += "update-rc.d-native"',
        "# systemd.bbclass's PACKAGE_WRITE_DEPS, likewise run only by do_rootfs's offline postinsts:",
        "# since whinlatter it is built from systemd's git source (meson, python3-native, ...)",
        'ASSUME_PROVIDED += "systemd-systemctl-native"',
        "# nodistro inherits uninative since whinlatter: its loader tarball is downloaded (the",
        "# host's own glibc runs the -native tools here)",
        'INHERIT_DISTRO:remove = "uninative"',
        'PARALLEL_MAKE = "-j 2"',
    ]
