"""Real BitBake for the layer tests (tests/packer/test_bitbake*.py): the Yocto snapshots of
``../shared/yocto`` (beside the repository; ``Q25_YOCTO_SNAPSHOTS`` overrides) unpacked once
per test session, build directories for MACHINE qemuarm64 (or a board's own) / DISTRO nodistro /
``BB_NO_NETWORK``, and BitBake run as a non-root user (``Q25_BITBAKE_USER``, default
``q25bb``; created here when missing and running as root), with an en_US.UTF-8 locale.

The series (SERIES_INFO; ``LAYERSERIES_COMPAT_q25`` names exactly these): langdale (PetaLinux
2023.1-2024.1), scarthgap (PetaLinux 2024.2+), whinlatter (5.3) and wrynose (Yocto 6.0) are
parsed on every run; scarthgap is built through packaging on every run, langdale (kv260) and
wrynose (qemu) in the full matrix (``Q25_BITBAKE_BUILDS=all``). The snapshots of whinlatter and wrynose hold no meta-xilinx, and
their meta-arm-toolchain no longer has the external Linux toolchain: wrynose's packaging build
takes scarthgap's (tests/yocto_toolchain.py).

One build directory per series and layer set ("declared": OE-core + meta-q25; "xilinx":
+ meta-arm, meta-arm-toolchain and meta-xilinx-core where the snapshot has it; "package":
OE-core + meta-arm's external toolchain (+ meta-arm and meta-xilinx-core where the snapshot has
it) building with Debian's cross toolchain (tests/yocto_toolchain.py); "package-kv260":
"package" with kv260's own MACHINE for the series (SERIES_INFO: PetaLinux 2024.1's
xilinx-k26-kv on langdale, meta-kria's k26-smk-kv-sdt on scarthgap), from a stand-in for that
machine configuration (tests/data/yocto/meta-kria-stand-in, on meta-xilinx-core's ZynqMP
machines) instead of qemuarm64; any other name: "declared" plus the layer directories a test
gives, e.g. a stand-in for a layer the snapshots lack); every board's meta-q25 is copied to the
same path in turn, so the configuration (and the parse cache) stays the same and a board change
reparses only its own recipes. All but "package-kv260" are MACHINE qemuarm64 with every board's
MACHINE names as overrides (so each board's COMPATIBLE_MACHINE recipes parse and run). The
"declared" build masks OE-core's recipes (BBMASK): OE-core's configuration and classes are all
loaded, so what could break there (a layer or class meta-q25 needs but does not declare, a
bbappend without its recipe, our recipes' own parse) still does, without a second cold parse
of ~900 recipes per series; the "xilinx" build parses everything. ``Q25_BITBAKE_WORKDIR`` keeps
the whole tree (and its warm cache) for the next run; otherwise it is removed at the end of the
session.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yocto_toolchain
from requirements import need, need_program

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Series:
    """What CI does on one Yocto series, and what its snapshot holds."""

    name: str
    releases: str  # who is on it (docs/yocto.md's table)
    built: tuple[str, ...]  # boards whose four recipes every run builds through packaging
    xilinx: bool  # the snapshot holds meta-xilinx-core (the device-tree bbappend's recipe)
    toolchain: str  # the series whose meta-arm-toolchain has the external Linux toolchain
    kv260_machine: str = ""  # kv260's MACHINE in its "package-kv260" build
    # BBMASK for the snapshot's meta-xilinx-core: its appends to recipes of layers the
    # snapshots lack (BitBake fails on a bbappend without its recipe)
    xilinx_mask: str = ""
    # its BitBake hashes the code dependencies of OE-core's Python library (oe.*) into the
    # configuration hash, and leaves out the functions a module runs through
    # bb.build.exec_func (oe.spdx_common's) when it reads them from its codeparser cache
    # instead of parsing them: the first run in a build directory writes its parse cache under
    # a hash no later run computes, and the next run (a tinfoil probe) parses every recipe
    # again; BuildDir.warm_codeparser has a one-recipe parse write that cache first
    codeparser_hash: bool = False
    # boards built through packaging only in the full matrix (Q25_BITBAKE_BUILDS=all): a build
    # per series costs a cold parse and the -native tools (.ci/run's figures), and what differs
    # between series is what the parse and -e tests of every run already read
    full_built: tuple[str, ...] = ()


# scarthgap first: the tests that run on one series take the first of Q25_BITBAKE_SERIES
SERIES_INFO = {
    s.name: s
    for s in (
        Series(
            "scarthgap",
            releases="Yocto 5.0 LTS; PetaLinux 2024.2, 2025.x",
            built=("qemu", "kv260"),
            xilinx=True,
            toolchain="scarthgap",
            kv260_machine="k26-smk-kv-sdt",  # meta-kria's (scarthgap branch)
        ),
        Series(
            "langdale",
            releases="Yocto 4.1; PetaLinux 2023.1, 2023.2, 2024.1",
            built=(),
            full_built=("kv260",),
            xilinx=True,  # meta-xilinx-core rel-v2024.1
            toolchain="langdale",
            # the machine file petalinux-config generates for a KV260 project
            # (tests/data/yocto/meta-kria-stand-in/README.md)
            kv260_machine="xilinx-k26-kv",
            # rel-v2024.1 appends meta-oe's v4l-utils and yavta (PetaLinux has meta-oe)
            xilinx_mask="/meta-xilinx-core/recipes-multimedia/v4l2apps/",
        ),
        # meta-arm dropped the external Linux toolchain after scarthgap: wrynose builds with
        # scarthgap's (tests/yocto_toolchain.py); meta-xilinx has no wrynose or whinlatter branch
        Series(
            "wrynose",
            releases="Yocto 6.0 LTS",
            built=(),
            full_built=("qemu",),
            xilinx=False,
            toolchain="scarthgap",
            codeparser_hash=True,
        ),
        Series("whinlatter", releases="Yocto 5.3", built=(), xilinx=False, toolchain="", codeparser_hash=True),
    )
}
SERIES = tuple(SERIES_INFO)
# where do_unpack puts a recipe's files: UNPACKDIR (WORKDIR/sources since whinlatter), or
# WORKDIR itself where OE-core has no UNPACKDIR (langdale, scarthgap)
UNPACK_SUBDIR = {"whinlatter": "sources", "wrynose": "sources"}


def unpacked_s(series: str, workdir: str, subdir: str = "") -> tuple[str, str | None]:
    """(S, UNPACKDIR) `bitbake -e` must give a recipe of the layer on ``series`` with this
    WORKDIR: S where do_unpack puts the files (``subdir`` of it for a recipe unpacking into
    one), UNPACKDIR None where OE-core has none."""
    sub = UNPACK_SUBDIR.get(series)
    unpacked = f"{workdir}/{sub}" if sub else workdir
    return (f"{unpacked}/{subdir}" if subdir else unpacked, unpacked if sub else None)


BOARDS = ("kv260", "zcu104", "qemu")
LAYER = "meta-q25"
PROBE = Path(__file__).with_name("bitbake_probe.py")
DEVICE_TREE = "meta-xilinx/meta-xilinx-core/recipes-bsp/device-tree/device-tree.bb"
ARM_LAYERS = ("meta-arm/meta-arm", "meta-arm/meta-arm-toolchain")
XILINX_LAYERS = (*ARM_LAYERS, "meta-xilinx/meta-xilinx-core")
TOOLCHAIN_LAYER = "meta-arm/meta-arm-toolchain"
# tasks that need no compiler and no pseudo can run offline: the layer has no patches
ASSUME_PROVIDED = "patch-native quilt-native patch-replacement-native"
HOST_TOOLS = (
    "gawk",
    "chrpath",
    "diffstat",
    "makeinfo",
    "cpio",
    "file",
    "socat",
    "zstd",
    "lz4",
    "git",
    "g++",
    "wget",
    "xz",
    "patch",
)
HOW = "Debian: the Yocto host packages in .ci/run"
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
TIMEOUT = 1200
PACKAGE = "package"  # the layer set that builds and packages: "xilinx" + Debian's cross toolchain
# boards built with their own MACHINE (the series' kv260_machine, one of the board file's
# yocto_machine) in a "package-<board>" build: the layer holding that MACHINE's configuration
MACHINE_LAYERS = {"kv260": Path(__file__).with_name("data") / "yocto" / "meta-kria-stand-in"}
# what an image installs of the layer (packagegroup-q25 and what it brings), built by the "package" build
RECIPES = ("q25-tokenizer-runtime", "q25-model-assets", "q25-regions", "packagegroup-q25")


def selected(var: str, default: tuple[str, ...]) -> list[str]:
    """``Q25_BITBAKE_SERIES`` / ``Q25_BITBAKE_BOARDS`` (space-separated), else all of them."""
    return os.environ.get(var, " ".join(default)).split()


def snapshots() -> Path:
    return Path(os.environ.get("Q25_YOCTO_SNAPSHOTS") or REPO.parent / "shared" / "yocto")


def package_layers(board: str) -> str:
    """The layer set that builds and packages ``board``'s layer: "package-<board>" (its own
    MACHINE) for a board in MACHINE_LAYERS, else "package" (qemuarm64)."""
    return f"{PACKAGE}-{board}" if board in MACHINE_LAYERS else PACKAGE


def package_board(layers: str) -> str | None:
    """The board of a "package-<board>" layer set (None for any other)."""
    return next((b for b in MACHINE_LAYERS if layers == package_layers(b)), None)


def package_machine(series: str, board: str) -> str:
    """The MACHINE ``board``'s "package-<board>" build uses on ``series``: the one that
    series' users build (SERIES_INFO), which must be one of the board file's yocto_machine."""
    from q25deploy.board.boardfile import load_board
    from q25deploy.resources import data_dir

    machine = {"kv260": SERIES_INFO[series].kv260_machine}[board]
    assert machine in load_board(data_dir("targets") / f"{board}.toml").yocto_machines, (series, board, machine)
    return machine


def built_pairs() -> list[tuple[str, str]]:
    """(series, board) pairs whose four recipes are built through packaging: each series'
    ``built`` (every run), and its ``full_built`` too with ``Q25_BITBAKE_BUILDS=all``; narrowed
    by ``Q25_BITBAKE_SERIES`` / ``Q25_BITBAKE_BOARDS``."""
    boards = selected("Q25_BITBAKE_BOARDS", BOARDS)
    full = os.environ.get("Q25_BITBAKE_BUILDS") == "all"
    return [
        (s, b)
        for s in selected("Q25_BITBAKE_SERIES", SERIES)
        for b in SERIES_INFO[s].built + (SERIES_INFO[s].full_built if full else ())
        if b in boards
    ]


def board_machines() -> list[str]:
    """Every built-in board's MACHINE names: overrides on qemuarm64 in the build directories,
    so each board's COMPATIBLE_MACHINE recipe is parsed (not skipped) and can run tasks."""
    from q25deploy.board.boardfile import load_board
    from q25deploy.resources import data_dir

    names: list[str] = []
    for b in BOARDS:
        names += [m for m in load_board(data_dir("targets") / f"{b}.toml").yocto_machines if m not in names]
    return [m for m in names if m != "qemuarm64"]


@dataclass
class Result:
    args: list[str]
    returncode: int
    output: str
    seconds: float

    def errors(self) -> list[str]:
        return [ln for ln in self.output.splitlines() if ln.startswith("ERROR")]

    def warnings_naming(self, word: str) -> list[str]:
        return [ln for ln in self.output.splitlines() if ln.startswith("WARNING") and word in ln]

    def parsed(self) -> tuple[int, int] | None:
        """(cached, parsed) recipe files of a parse, from BitBake's summary line."""
        m = re.search(r"Parsing of \d+ \.bb files complete \((\d+) cached, (\d+) parsed\)", self.output)
        return (int(m.group(1)), int(m.group(2))) if m else None

    def parse_note(self) -> str:
        """The parse's counts for the timings; BitBake prints no summary when every recipe came
        from the parse cache, only how many entries it loaded."""
        counts = self.parsed()
        if counts:
            return f"{counts[0]} cached, {counts[1]} parsed"
        m = re.search(r"Loaded (\d+) entries from dependency cache", self.output)
        return f"all from the parse cache: {m.group(1)} entries, 0 parsed" if m else ""


class Workspace:
    """The session's BitBake trees: series → unpacked snapshot, (series, layers) → build dir."""

    def __init__(self, root: Path, user: str | None, keep: bool):
        self.root, self.user, self.keep = root, user, keep
        self.trees: dict[str, Path] = {}
        self.builds: dict[tuple[str, str], BuildDir] = {}
        self.timings: list[tuple[str, float, str]] = []
        self._stamp = 0

    @classmethod
    def create(cls) -> Workspace:
        for prog in HOST_TOOLS:
            need_program(prog, HOW)
        r = subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False)
        need(
            re.search(r"^en_US\.utf-?8$", r.stdout, re.M | re.I) is not None,
            "locale en_US.UTF-8",
            "enable it in /etc/locale.gen and run locale-gen (.ci/run does)",
        )
        user = None
        if os.geteuid() == 0:  # BitBake refuses root
            need_program("runuser", "Debian: util-linux")
            user = os.environ.get("Q25_BITBAKE_USER", "q25bb")
            try:
                pwd.getpwnam(user)
            except KeyError:
                subprocess.run(["useradd", "-m", user], check=True, capture_output=True)
        keep = os.environ.get("Q25_BITBAKE_WORKDIR")
        if keep:
            root = Path(keep)
            root.mkdir(parents=True, exist_ok=True)
        else:  # not under pytest's tmp: that is private to the user running pytest
            root = Path(tempfile.mkdtemp(prefix="yocto-check-"))  # no "q25" in it: warnings are matched by name
        os.chmod(root, 0o755)
        ws = cls(root, user, bool(keep))
        ws.chown(root)
        return ws

    def chown(self, path: Path) -> None:
        if self.user:
            subprocess.run(["chown", "-R", f"{self.user}:", str(path)], check=True)

    def as_user(self, args: list[str], env: dict[str, str]) -> list[str]:
        cmd = ["env", "-i", *(f"{k}={v}" for k, v in sorted(env.items())), *args]
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def home(self) -> str:
        return pwd.getpwnam(self.user).pw_dir if self.user else os.path.expanduser("~")

    def tree(self, series: str) -> Path:
        """The series' snapshot, unpacked once (kept when Q25_BITBAKE_WORKDIR is set)."""
        if series not in self.trees:
            tarball = snapshots() / f"yocto-{series}.tar.xz"
            need(
                tarball.is_file(),
                f"Yocto snapshot {tarball}",
                "../shared/yocto beside the repository, or set Q25_YOCTO_SNAPSHOTS",
            )
            top = self.root / series
            if not (top / "bitbake" / "bin" / "bitbake").is_file():
                top.mkdir(exist_ok=True)
                t0 = time.monotonic()
                # --touch: the langdale, whinlatter and wrynose snapshots store every file with
                # mtime 0, which langdale's BitBake (2.2) takes for a file that no longer exists:
                # it would reparse every recipe of the snapshot on every run, parse cache or not
                subprocess.run(
                    ["tar", "--no-same-owner", "--touch", "-xJf", str(tarball), "-C", str(top)],
                    check=True,
                    capture_output=True,
                )
                self.chown(top)  # the trees must belong to BitBake's user
                self.timings.append((f"{series}: unpack", time.monotonic() - t0, ""))
            self.trees[series] = top
        return self.trees[series]

    def build(self, series: str, layers: str, extra: tuple[Path, ...] = ()) -> BuildDir:
        """The build directory of a layer set; ``extra``: more layers (with a new set name)."""
        key = (series, layers)
        if key not in self.builds:
            self.builds[key] = BuildDir.create(self, series, layers, extra)
        return self.builds[key]

    def next_stamp(self) -> int:
        """An mtime later than every earlier layer copy's: BitBake's cache compares whole seconds."""
        self._stamp = max(self._stamp + 2, int(time.time()))
        return self._stamp

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class BuildDir:
    ws: Workspace
    series: str
    # "declared", "xilinx", "package", "package-<board>", or a test's name for "declared" + its extra layers
    layers: str
    path: Path
    tree: Path
    installed: str | None = None  # which layer copy is in place
    probes: dict = field(default_factory=dict)
    full: bool = False  # OE-core's recipes are parsed (not masked): "xilinx" and the "package" builds
    warmed: bool = False  # warm_codeparser has run

    @property
    def layer(self) -> Path:
        return self.tree / "layers" / self.layers / LAYER

    @classmethod
    def create(cls, ws: Workspace, series: str, layers: str, extra: tuple[Path, ...] = ()) -> BuildDir:
        tree = ws.tree(series)
        path = tree / f"build-{layers}"
        bd = cls(ws, series, layers, path, tree)
        (path / "conf").mkdir(parents=True, exist_ok=True)
        (bd.layer.parent).mkdir(parents=True, exist_ok=True)
        board = package_board(layers)  # a board built with its own MACHINE
        packaging = layers == PACKAGE or board is not None
        info = SERIES_INFO[series]
        paths = [tree / "openembedded-core" / "meta"]
        bsp = XILINX_LAYERS if info.xilinx else ARM_LAYERS  # the snapshot's
        if layers == "xilinx" or packaging and info.toolchain == series:
            paths += [tree / p for p in bsp]
        meta_xilinx = any(p.name == "meta-xilinx-core" for p in paths)
        borrowed = packaging and info.toolchain != series
        if borrowed:  # meta-arm's external Linux toolchain from the last series that had it
            paths.append(ws.tree(info.toolchain) / TOOLCHAIN_LAYER)
        if board:
            assert info.xilinx, (series, board)  # the stand-in machines are on meta-xilinx-core's
            extra = (*extra, bd.machine_layer(board))
        if packaging:
            extra = (*extra, *bd.packaging())
        paths += [*extra, bd.layer]
        if board:
            machine = [
                f"# {board}'s own MACHINE on {series} (one of its board file's yocto_machine):",
                f"# {MACHINE_LAYERS[board].name}'s machine configuration on meta-xilinx-core's",
                "# (tests/data/yocto/meta-kria-stand-in/README.md)",
                f'MACHINE = "{package_machine(series, board)}"',
                "# meta-xilinx-core's xilinx-vars.bbclass warns on every run unless the licence flag of the",
                "# ZynqMP PMU ROM (pmu-rom-native: runqemu's ZynqMP emulation) is accepted: for that recipe",
                "# only, which nothing here builds; rel-v2024.1 (langdale) checks for the whole 'xilinx'",
                "# flag, which PetaLinux accepts",
                f'LICENSE_FLAGS_ACCEPTED += "{"xilinx" if series == "langdale" else "xilinx_pmu-rom-native"}"',
            ]
        else:
            machine = ['MACHINE = "qemuarm64"']
        local = [
            *machine,
            'DISTRO = "nodistro"',
            'BB_NO_NETWORK = "1"',
            'BB_NUMBER_THREADS = "2"',
            'BB_NUMBER_PARSE_THREADS = "2"',
            "# one sstate cache and download directory for every build of the session: the -native",
            "# tools and licence tasks one build made, another of the same series takes from sstate",
            f'SSTATE_DIR = "{ws.root / "sstate-cache"}"',
            f'DL_DIR = "{ws.root / "downloads"}"',
            "# and the hash equivalence database beside it (wrynose warns of a shared sstate without it)",
            'BB_HASHSERVE_DB_DIR = "${SSTATE_DIR}"',
        ]
        if not board:
            local += [
                "# the built-in boards' MACHINE names as overrides of qemuarm64: their COMPATIBLE_MACHINE",
                "# recipes are parsed and run (the same configuration, and parse cache, for every board)",
                f'MACHINEOVERRIDES =. "{"".join(m + ":" for m in board_machines())}"',
            ]
        local += [f'ASSUME_PROVIDED += "{ASSUME_PROVIDED}"']
        if info.xilinx_mask and meta_xilinx:
            local += [
                "# meta-xilinx-core's appends to meta-openembedded's recipes (not in the snapshots)",
                f'BBMASK += "{info.xilinx_mask}"',
            ]
        if packaging:
            local += yocto_toolchain.local_conf(tree / "debian-cross", tree / "openembedded-core")
        if layers != "xilinx" and not packaging:
            # only meta-q25's own recipes: OE-core's configuration and classes are all there,
            # its ~900 recipes are parsed (cold, about a minute) in the "xilinx" build
            local += [
                'BBMASK += "/openembedded-core/meta/recipes-"',
                "# the mask leaves OE-core's collection empty on purpose: no warning for that",
                'BBFILE_PATTERN_IGNORE_EMPTY_core = "1"',
            ]
        (path / "conf" / "local.conf").write_text("\n".join(local) + "\n")
        bd.full = layers == "xilinx" or packaging
        compat = (
            [
                f"# {info.toolchain}'s meta-arm-toolchain (the last with the external Linux toolchain) on {series}:",
                "# tests/yocto_toolchain.py adapts it where OE-core changed",
                f'LAYERSERIES_COMPAT_arm-toolchain:append = " {series}"',
                "# its bare-metal toolchains and SDK toolchain are not used here (and do not parse cleanly there)",
                'BBMASK += "/meta-arm-toolchain/recipes-devtools/external-arm-toolchain/(gcc-|external-arm-sdk-)"',
            ]
            if borrowed
            else []
        )
        (path / "conf" / "bblayers.conf").write_text(
            'BBPATH = "${TOPDIR}"\nBBFILES ?= ""\nBBLAYERS = " \\\n'
            + "".join(f"  {p} \\\n" for p in paths)
            + '  "\n'
            + "".join(line + "\n" for line in compat)
        )
        ws.chown(tree / "layers")
        ws.chown(path)
        return bd

    def machine_layer(self, board: str) -> Path:
        """A copy of the layer with ``board``'s MACHINE configuration (MACHINE_LAYERS), beside
        meta-q25; the board's MACHINE must be one of its machine files."""
        src = MACHINE_LAYERS[board]
        machine = package_machine(self.series, board)
        assert (src / "conf" / "machine" / f"{machine}.conf").is_file(), (board, machine, src)
        dest = self.tree / "layers" / self.layers / src.name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest)
        return dest

    def packaging(self) -> list[Path]:
        """The "package" builds' extra parts (tests/yocto_toolchain.py): Debian's cross
        toolchain as EXTERNAL_TOOLCHAIN (assembled once per tree), its TCMODE in the build's
        conf/, and the layer staging Debian's pseudo; returns the extra layers."""
        for prog, how in yocto_toolchain.HOST_PROGRAMS.items():
            need_program(prog, how)
        toolchain = self.tree / "debian-cross"
        if not (toolchain / "bin").is_dir():
            t0 = time.monotonic()
            deb = yocto_toolchain.libc_bin_deb(self.ws.root / "debs")
            yocto_toolchain.assemble(toolchain, deb)
            self.ws.chown(toolchain)
            self.ws.timings.append((f"{self.series}: assemble Debian's cross toolchain", time.monotonic() - t0, ""))
        tcmode = self.path / "conf" / "distro" / "include" / f"tcmode-{yocto_toolchain.TCMODE}.inc"
        tcmode.parent.mkdir(parents=True, exist_ok=True)
        tcmode.write_text(yocto_toolchain.tcmode_inc(self.tree / "openembedded-core"))
        host = self.tree / "layers" / self.layers / yocto_toolchain.HOST_LAYER.name
        shutil.rmtree(host, ignore_errors=True)
        shutil.copytree(yocto_toolchain.HOST_LAYER, host)
        return [host]

    def env(self) -> dict[str, str]:
        # the same environment every time: it is part of BitBake's configuration hash
        home = self.ws.home()
        return {
            "HOME": home,
            "USER": self.ws.user or os.environ.get("USER", ""),
            "LANG": "en_US.UTF-8",
            "LC_ALL": "en_US.UTF-8",
            "PATH": f"{self.tree / 'bitbake' / 'bin'}:{PATH}",
            "SHELL": "/bin/sh",
        }

    def install(self, name: str, layer: Path) -> None:
        """Put a copy of `layer` at the build's meta-q25 path (fresh mtimes: BitBake's cache
        then reparses exactly the recipes that changed)."""
        if self.installed == name:
            return
        shutil.rmtree(self.layer, ignore_errors=True)
        shutil.copytree(layer, self.layer, copy_function=shutil.copyfile)
        stamp = self.ws.next_stamp()
        for p in [self.layer, *self.layer.rglob("*")]:
            os.utime(p, (stamp, stamp))
        self.ws.chown(self.layer)
        self.installed = name
        self.probes.clear()

    def warm_codeparser(self) -> None:
        """Before the first run of a full parse on a series whose BitBake hashes its codeparser
        cache's view of OE-core's Python library (Series.codeparser_hash): a parse of one
        recipe of the harness's own, which writes that cache, so that the full parse and
        every later run (the tinfoil probes, the tasks) compute the same configuration hash
        and load one parse cache instead of parsing every recipe twice."""
        self.warmed = True
        codeparser = self.path / "cache" / "bb_codeparser.dat"  # BB_CACHEDIR, ${TOPDIR}/cache
        if not (self.full and SERIES_INFO[self.series].codeparser_hash) or codeparser.exists():
            return
        work = self.path / "q25-warm-up"
        work.mkdir(exist_ok=True)
        recipe = work / "q25-warm-up.bb"
        recipe.write_text(
            'SUMMARY = "q25deploy tests: the one recipe of the codeparser warm-up (tests/yocto.py)"\n'
            'LICENSE = "CLOSED"\nINHIBIT_DEFAULT_DEPS = "1"\n'
        )
        conf = work / "warm-up.conf"
        conf.write_text(f'BBFILES = "{recipe}"\n')
        self.ws.chown(work)
        r = self.bitbake("-p", "--postread", str(conf), label="bitbake -p of one recipe (codeparser warm-up)")
        assert r.returncode == 0 and codeparser.exists(), r.output[-3000:]

    def run(self, *args: str, label: str = "") -> Result:
        if not self.warmed:
            self.warm_codeparser()
        t0 = time.monotonic()
        r = subprocess.run(
            self.ws.as_user(list(args), self.env()),
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        res = Result(list(args), r.returncode, r.stdout + r.stderr, time.monotonic() - t0)
        self.ws.timings.append(
            (f"{self.series}/{self.layers}: {label or ' '.join(args)}", res.seconds, res.parse_note())
        )
        return res

    def bitbake(self, *args: str, label: str = "") -> Result:
        return self.run("bitbake", *args, label=label)

    def probe(self, recipes: list[str], variables: list[str], device_tree: dict | None = None, label: str = "") -> dict:
        """What `bitbake -e` says of several recipes, in one tinfoil session (tests/bitbake_probe.py)."""
        key = json.dumps([recipes, variables, device_tree], sort_keys=True)
        if key in self.probes:
            return self.probes[key]
        work = self.path / "q25-probe"
        work.mkdir(exist_ok=True)
        shutil.copyfile(PROBE, work / PROBE.name)
        (work / "request.json").write_text(
            json.dumps({"recipes": recipes, "vars": variables, "device_tree": device_tree})
        )
        (work / "answer.json").unlink(missing_ok=True)
        self.ws.chown(work)
        r = self.run(
            "python3",
            str(work / PROBE.name),
            str(self.tree / "bitbake" / "lib"),
            str(work / "request.json"),
            str(work / "answer.json"),
            label=label or "tinfoil probe",
        )
        assert r.returncode == 0 and not r.errors(), r.output[-4000:]
        self.probes[key] = json.loads((work / "answer.json").read_text())
        return self.probes[key]


def edited_layer(build: Path, dest: Path, recipe: str, edit) -> Path:
    """A copy of ``build``'s meta-q25 under ``dest`` with ``recipe``'s one .bb rewritten by ``edit``
    (text -> text; it must change something): a broken layer for a check that must fail."""
    layer = dest / LAYER
    shutil.copytree(build / LAYER, layer)
    [bb] = (layer / "recipes-q25" / recipe).glob("*.bb")
    text = bb.read_text()
    new = edit(text)
    assert new != text
    bb.write_text(new)
    return layer
