"""The BitBake layer in every build: oelint-adv clean for every series it claims, every
SRC_URI file present, every LIC_FILES_CHKSUM md5 right, and the runtime recipe's own
make invocation run with the cross compiler, its result run under qemu-aarch64."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest
from layer_options import build_layer
from ollama_store import add_model
from release_modes import DIR_MODE, FILE_MODE
from requirements import need_program
from yocto import SERIES

from q25deploy.cli import main
from q25deploy.model.synthetic import write_model
from q25deploy.tokenizer.prompts import SMOKE_PROMPTS

LAYER = "meta-q25"


@pytest.fixture(scope="module")
def layers(builds):
    return builds


def recipe_files(layer: Path) -> list[Path]:
    return sorted([*layer.rglob("*.bb"), *layer.rglob("*.bbappend"), layer / "conf" / "layer.conf"])


@pytest.mark.parametrize("release", SERIES)
@pytest.mark.parametrize("target", ["kv260", "zcu104", "qemu"])
def test_oelint_adv_finds_nothing(layers, target, release):
    exe = need_program("oelint-adv", "pip install '.[test]' installs oelint-adv")
    files = recipe_files(layers[target] / LAYER)
    assert len(files) >= 4
    r = subprocess.run(
        [exe, "--quiet", "--release", release, *map(str, files)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr
    for f in files:  # every inline suppression says why
        for line in f.read_text().splitlines():
            if "nooelint" in line:
                assert re.match(r"# nooelint: [\w.,]+ - \S.{20,}", line), f"{f}: {line}"


def _var(text: str, name: str) -> str:
    m = re.search(rf'^{re.escape(name)} = "(.*?)"', text, re.S | re.M)
    assert m, name
    return m.group(1).replace("\\\n", " ")


@pytest.mark.parametrize("target", ["kv260", "zcu104", "qemu"])
def test_src_uri_files_exist_and_license_checksums_match(layers, target):
    layer = layers[target] / LAYER
    for bb in layer.rglob("*.bb*"):
        text = bb.read_text()
        srcs = re.findall(
            r"file://([^\s;\"]+)",
            "\n".join(
                line
                for line in text.splitlines()
                if line.lstrip().startswith(("SRC_URI", "file://")) or "file://" in line and "SRC_URI" in text
            ),
        )
        for rel in srcs:
            if rel in ("${THISDIR}/files:",):
                continue
            assert (bb.parent / "files" / rel).is_file(), f"{bb.name}: {rel}"
        for rel, md5 in re.findall(r"file://([^;\s\"]+);md5=([0-9a-f]{32})", text):
            assert hashlib.md5((bb.parent / "files" / rel).read_bytes()).hexdigest() == md5, f"{bb.name}: {rel}"


def test_layer_conf(layers):
    conf = (layers["kv260"] / LAYER / "conf" / "layer.conf").read_text()
    assert 'BBFILE_COLLECTIONS += "q25"' in conf and 'LAYERDEPENDS_q25 = "core"' in conf
    # exactly the series the BitBake tests build or parse (tests/yocto.py)
    assert f'LAYERSERIES_COMPAT_q25 = "{" ".join(sorted(SERIES))}"' in conf
    assert 'BBFILE_PATTERN_q25 = "^${LAYERDIR}/"' in conf


DT = ("dynamic-layers", "xilinx", "recipes-bsp", "device-tree")


def test_device_tree_parts_are_machine_specific(layers):
    kv = layers["kv260"].joinpath(LAYER, *DT, "device-tree.bbappend").read_text()
    assert 'EXTRA_DT_INCLUDE_FILES:append:k26-smk-kv-sdt = " q25-reserved-memory.dtsi"' in kv
    assert 'FILESEXTRAPATHS:prepend:xilinx-k26-kv := "${THISDIR}/files:"' in kv
    assert "EXTRA_DT_INCLUDE_FILES:append:xilinx-k26-kv = " in kv  # once, also with both names (tests/test_bitbake.py)
    # meta-xilinx rel-v2024.1's name for the same list (langdale: PetaLinux 2023.1-2024.1)
    assert 'EXTRA_OVERLAYS:append:k26-smk-kv-sdt = " q25-reserved-memory.dtsi"' in kv
    assert "EXTRA_OVERLAYS:append:xilinx-k26-kv = " in kv
    assert not re.search(r"^SRC_URI", kv, re.M)  # meta-xilinx adds EXTRA_DT_INCLUDE_FILES to SRC_URI itself
    dtsi = layers["kv260"].joinpath(LAYER, *DT, "files", "q25-reserved-memory.dtsi")
    assert dtsi.read_bytes() == (layers["kv260"] / "reserved-memory.dtsi").read_bytes()
    zc = layers["zcu104"].joinpath(LAYER, *DT, "device-tree.bbappend").read_text()
    assert ":append:zynqmp-zcu104-sdt-full = " in zc and ":append:xilinx-zcu104 = " in zc
    # only with meta-xilinx-core (collection "xilinx") in BBLAYERS
    conf = (layers["kv260"] / LAYER / "conf" / "layer.conf").read_text()
    assert 'BBFILES_DYNAMIC += "xilinx:${LAYERDIR}/dynamic-layers/xilinx/recipes-*/*/*.bbappend"' in conf
    assert not (layers["kv260"] / LAYER / "recipes-bsp").exists()
    # QEMU makes its own device tree: the qemu plugin drops the bbappend, and the README
    # promises none
    assert not (layers["qemu"] / LAYER / "dynamic-layers").exists()
    readme = (layers["qemu"] / LAYER / "README.md").read_text()
    assert "bbappend" not in readme and "needs no device-tree recipe change" in readme


# S where do_unpack puts a recipe's files on every series the layer claims: UNPACKDIR where
# OE-core has one (whinlatter, wrynose: they refuse S = WORKDIR), WORKDIR before (langdale,
# scarthgap), optionally a subdirectory of it
_S_LINE = re.compile(r"""^S = "\$\{@d\.getVar\('UNPACKDIR'\) or d\.getVar\('WORKDIR'\)\}(/[\w.-]+)?"$""")


@pytest.fixture(scope="module")
def option_layer(tmp_path_factory, qwen25_tiny) -> Path:
    return build_layer(tmp_path_factory.mktemp("option-layer"), qwen25_tiny)


def test_every_recipe_sets_s_from_unpackdir_where_there_is_one(layers, option_layer):
    """Every recipe any board or build option emits (the built-in boards' layers, and kv260's
    with every option on: both OTA engines, dropbear's window, the user-space install path)
    sets S from OE-core's UNPACKDIR, falling back to WORKDIR, and never assigns UNPACKDIR
    itself: a weak ``UNPACKDIR ??=`` overrides bitbake.conf's (the last one wins) and makes
    S the WORKDIR that wrynose refuses ("Using S = ${WORKDIR} is no longer supported")."""
    recipes = [
        bb
        for layer in (*(layers[t] / LAYER for t in ("kv260", "zcu104", "qemu")), option_layer)
        for bb in sorted(layer.rglob("*.bb"))
    ]
    names = {bb.name for bb in recipes}
    assert {"q25-ota-mender_1.0.bb", "q25-ota-swupdate_1.0.bb", "q25-regions_1.0.bb"} <= names, names
    for f in [*recipes, *option_layer.rglob("*.bbappend")]:
        text = f.read_text()
        assert not re.search(r"^\s*UNPACKDIR\s*[?:+.]*=", text, re.M), f
        s_lines = [ln for ln in text.splitlines() if re.match(r"\s*S\s*[?:+.]*=", ln)]
        if f.suffix == ".bb" and re.search(r"^SRC_URI = ", text, re.M):
            assert len(s_lines) == 1 and _S_LINE.match(s_lines[0]), (f, s_lines)
        else:  # a packagegroup unpacks nothing; an append leaves the recipe's S alone
            assert s_lines == [], (f, s_lines)


def test_model_assets_recipe(layers):
    d = layers["kv260"]
    recipes = list((d / LAYER / "recipes-q25" / "q25-model-assets").glob("q25-model-assets_*.bb"))
    assert len(recipes) == 1
    pv = recipes[0].name[len("q25-model-assets_") : -3]
    assert re.fullmatch(r"1\.0\+q25\.[0-9a-f]{12}", pv)
    text = recipes[0].read_text()
    assert "inherit allarch" not in text and 'LICENSE = "Apache-2.0"' in text
    assert 'PACKAGE_ARCH = "${MACHINE_ARCH}"' in text
    assert 'COMPATIBLE_MACHINE = "^(k26-smk-kv-sdt|xilinx-k26-kv)$"' in text
    group = (d / LAYER / "recipes-q25" / "packagegroups" / "packagegroup-q25.bb").read_text()
    assert 'COMPATIBLE_MACHINE = "^(k26-smk-kv-sdt|xilinx-k26-kv)$"' in group
    assert "S = \"${@d.getVar('UNPACKDIR') or d.getVar('WORKDIR')}\"" in text and "UNPACKDIR ?" not in text
    assert 'Q25_INSTALL_DIR = "${nonarch_base_libdir}/firmware/q25"' in text
    files = d / LAYER / "recipes-q25" / "q25-model-assets" / "files"
    part = files / "region_00.bin"
    assert part.stat().st_ino == (d / "partitions" / "region_00.bin").stat().st_ino  # weights stored once
    manifest = json.loads((files / "assets_manifest.json").read_text())
    assert {e["path"] for e in manifest["files"]} >= {
        "/lib/firmware/q25/tokenizer.q25tokrt",
        "/lib/firmware/q25/partitions/region_00.bin",
        "/lib/firmware/q25/partition_map.json",
    }
    for e in manifest["files"]:
        name = Path(e["path"]).name
        assert hashlib.sha256((files / name).read_bytes()).hexdigest() == e["sha256"]
        assert f"install -m 0644 ${{S}}/{name} " in text
    # the memory-map header: ${includedir} only (the -dev package), not the install dir
    assert not any(e["path"].endswith("q25_memory_map.h") for e in manifest["files"])
    assert re.findall(r"install .*q25_memory_map\.h.*", text) == [
        "install -m 0644 ${S}/q25_memory_map.h ${D}${includedir}/q25_memory_map.h"
    ]


def test_the_recipe_installs_the_release_in_its_one_mode(layers):
    """The recipe's install lines give what deploy and the OTA clients give a release
    (tests/release_modes.py): files 0644, directories ``install -d`` (0755)."""
    recipe = next((layers["kv260"] / LAYER / "recipes-q25" / "q25-model-assets").glob("q25-model-assets_*.bb"))
    lines = [line.split() for line in recipe.read_text().splitlines() if line.strip().startswith("install ")]
    into = [w for w in lines if any(a.startswith("${D}${Q25_INSTALL_DIR}") for a in w)]
    files = [w for w in into if w[1] != "-d"]
    assert len(files) >= 5 and all(w[1:3] == ["-m", f"{FILE_MODE:04o}"] for w in files), files
    assert DIR_MODE == 0o755 and all("-m" not in w for w in into if w[1] == "-d")  # install -d: 0755


def test_pv_follows_the_content(tmp_path, layers, qwen25_tiny):

    other = tmp_path / "other.gguf"
    write_model(other, "tiny", str(Path(__file__).parent.parent / "data" / "ggml-vocab-qwen2.gguf"), seed=7)
    for model, same in ((qwen25_tiny, True), (other, False)):
        out = tmp_path / ("same" if same else "diff")
        assert main(["build", "--target", "kv260", "--model", str(model), "--out", str(out), "--forward", "all"]) == 0
        a = sorted(p.name for p in (layers["kv260"] / LAYER / "recipes-q25" / "q25-model-assets").glob("*.bb"))
        b = sorted(p.name for p in (out / LAYER / "recipes-q25" / "q25-model-assets").glob("*.bb"))
        assert (a == b) is same


def test_layer_release_and_maintainer(tmp_path, layers, qwen25_tiny):
    """--layer-release goes into PV before the hash (tests/test_bitbake.py orders them with
    BitBake's own vercmp); --layer-maintainer into the README, which always says where
    patches go (yocto-check-layer's test_readme)."""
    out = tmp_path / "r12"
    assert (
        main(
            [
                "build",
                "--target",
                "qemu",
                "--model",
                str(qwen25_tiny),
                "--out",
                str(out),
                "--layer-release",
                "12",
                "--layer-maintainer",
                "Ada Board <ada@example.org>",
                "--forward",
                "all",  # as the shared builds record it
            ]
        )
        == 0
    )
    [bb] = (out / LAYER / "recipes-q25" / "q25-model-assets").glob("*.bb")
    [old] = (layers["qemu"] / LAYER / "recipes-q25" / "q25-model-assets").glob("*.bb")
    assert bb.name.startswith("q25-model-assets_1.12+q25.") and old.name.startswith("q25-model-assets_1.0+q25.")
    assert bb.name.split("+q25.")[1] == old.name.split("+q25.")[1]  # same content, same hash
    readme = (out / LAYER / "README.md").read_text()
    assert "Maintainer: Ada Board <ada@example.org>" in readme and "patch" in readme
    assert "README" not in readme  # else yocto-check-layer's test_readme checks nothing
    default = (layers["qemu"] / LAYER / "README.md").read_text()
    assert "Maintainer: not named" in default and "@" not in default
    # SECURITY.md (yocto-check-layer's test_security, styhead and later) says whom to report to
    security = (out / LAYER / "SECURITY.md").read_text()
    assert "Ada Board <ada@example.org>" in security and bb.name.split("_")[1][: -len(".bb")] in security
    assert "not named" in (layers["qemu"] / LAYER / "SECURITY.md").read_text()
    for bad in (["--layer-release", "-1"], ["--layer-release", "\u00b2"], ["--layer-maintainer", "a\nb"]):
        with pytest.raises(SystemExit) as e:
            main(["build", "--target", "qemu", "--model", str(qwen25_tiny), "--out", str(tmp_path / "x"), *bad])
        assert e.value.code == 2 and not (tmp_path / "x").exists()


def test_license_comes_from_ollama_or_is_refused(tmp_path, capsys, qwen25_tiny, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "o"))
    add_model(tmp_path / "o", "qwen2.5:0.5b", qwen25_tiny, license="Qwen LICENSE AGREEMENT (test text)\n")
    assert main(["build", "--target", "zcu104", "--model", "qwen2.5:0.5b", "--out", str(tmp_path / "a")]) == 0
    lic = next((tmp_path / "a" / LAYER).rglob("MODEL-LICENSE")).read_text()
    assert lic == "Qwen LICENSE AGREEMENT (test text)\n"
    # a model that names no licence: a clear error, nothing written

    nolic = tmp_path / "nolic.gguf"
    write_model(nolic, "tiny", str(Path(__file__).parent.parent / "data" / "ggml-vocab-qwen2.gguf"), license=None)
    capsys.readouterr()
    assert main(["build", "--target", "zcu104", "--model", str(nolic), "--out", str(tmp_path / "b")]) == 12
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names no licence" in err and not (tmp_path / "b").exists()
    text = tmp_path / "LICENSE.txt"
    text.write_text("Custom research licence\n")
    assert (
        main(
            [
                "build",
                "--target",
                "zcu104",
                "--model",
                str(nolic),
                "--out",
                str(tmp_path / "b"),
                "--model-license",
                "qwen-research",
                "--model-license-file",
                str(text),
            ]
        )
        == 0
    )
    bb = next((tmp_path / "b" / LAYER).rglob("q25-model-assets_*.bb")).read_text()
    assert 'LICENSE = "qwen-research"' in bb and 'NO_GENERIC_LICENSE[qwen-research] = "MODEL-LICENSE"' in bb


def _oe_expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], text)


def test_runtime_built_as_the_recipe_does_runs_under_qemu(layers, tmp_path):
    """EXTRA_OEMAKE, do_compile and do_install taken from the recipe and run with the
    cross toolchain's variables, as BitBake would (oe_runmake = make ${EXTRA_OEMAKE})."""
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
    qemu = need_program("qemu-aarch64", "Debian: qemu-user")
    recipe_dir = layers["kv260"] / LAYER / "recipes-q25" / "q25-tokenizer-runtime"
    text = (recipe_dir / "q25-tokenizer-runtime_1.0.bb").read_text()
    S = tmp_path / "S"
    for rel in re.findall(r"file://([^\s;]+)", _var(text, "SRC_URI")):
        S.mkdir(exist_ok=True)
        (S / rel).write_bytes((recipe_dir / "files" / rel).read_bytes())
    D = tmp_path / "image"
    env = {
        "CC": "aarch64-linux-gnu-gcc -mcpu=cortex-a53",
        "AR": "aarch64-linux-gnu-ar",
        "CFLAGS": "-O2 -pipe -g -feliminate-unused-debug-types",
        "LDFLAGS": "-Wl,-O1 -Wl,--hash-style=gnu -Wl,--as-needed",
        "prefix": "/usr",
        "bindir": "/usr/bin",
        "libdir": "/usr/lib",
        "includedir": "/usr/include",
        "D": str(D),
    }
    oemake = shlex.split(_oe_expand(_var(text, "EXTRA_OEMAKE"), env))
    for task in ("do_compile", "do_install"):
        body = re.search(rf"^{task}\(\) \{{\n(.*?)^\}}", text, re.S | re.M).group(1)
        for line in body.strip().splitlines():
            words = shlex.split(_oe_expand(line.strip(), env))
            assert words[0] == "oe_runmake"
            subprocess.run(["make", "-C", str(S), *oemake, *words[1:]], check=True, capture_output=True)
    q25tok = D / "usr" / "bin" / "q25tok"
    assert (D / "usr" / "lib" / "libq25tok.a").is_file() and (D / "usr" / "include" / "q25tok.h").is_file()
    assert int.from_bytes(q25tok.read_bytes()[18:20], "little") == 183  # aarch64
    image = layers["kv260"] / LAYER / "recipes-q25" / "q25-model-assets" / "files" / "tokenizer.q25tokrt"
    r = subprocess.run(
        [qemu, "-cpu", "cortex-a53", "-L", "/usr/aarch64-linux-gnu", str(q25tok), "encode", str(image)],
        input=b"Hello world",
        capture_output=True,
        check=True,
    )
    assert r.stdout == b"9707 1879\n"


def test_oeqa_smoke_case_holds_the_host_ids(layers, qwen25_codec):
    path = layers["kv260"] / LAYER / "lib" / "oeqa" / "runtime" / "cases" / "q25_smoke.py"
    # import it with stand-ins for the oeqa modules (they live in OE-core)
    case_mod = types.ModuleType("oeqa.runtime.case")
    case_mod.OERuntimeTestCase = type("OERuntimeTestCase", (), {})
    pkg_mod = types.ModuleType("oeqa.runtime.decorator.package")
    pkg_mod.OEHasPackage = lambda names: lambda f: f
    saved = {
        k: sys.modules.get(k)
        for k in (
            "oeqa",
            "oeqa.runtime",
            "oeqa.runtime.case",
            "oeqa.runtime.decorator",
            "oeqa.runtime.decorator.package",
        )
    }
    sys.modules.update(
        {
            "oeqa": types.ModuleType("oeqa"),
            "oeqa.runtime": types.ModuleType("oeqa.runtime"),
            "oeqa.runtime.case": case_mod,
            "oeqa.runtime.decorator": types.ModuleType("x"),
            "oeqa.runtime.decorator.package": pkg_mod,
        }
    )
    try:
        ns: dict = {}
        exec(compile(path.read_text(), str(path), "exec"), ns)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    assert ns["IMAGE"] == "/lib/firmware/q25/tokenizer.q25tokrt"
    assert len(ns["PROMPTS"]) == len(SMOKE_PROMPTS)
    for (b64, special, ids), (text, sp) in zip(ns["PROMPTS"], SMOKE_PROMPTS):
        assert base64.b64decode(b64) == text and special == sp
        assert ids == qwen25_codec.encode(text, sp)
    assert any(151644 in ids for _, _, ids in ns["PROMPTS"])  # the chat template's control tokens


def test_a_hostile_model_name_reaches_the_recipe_as_plain_text(tmp_path, vocab_gguf):
    """GGUF general.name is model data: never BitBake code in the user's build host."""
    hostile = tmp_path / "hostile.gguf"
    write_model(hostile, "tiny", str(vocab_gguf), name='q\n${@bb.utils.mkdirhier("/tmp/x")}"\\')
    out = tmp_path / "b"
    assert main(["build", "--target", "kv260", "--model", str(hostile), "--out", str(out)]) == 0
    recipe = next((out / LAYER / "recipes-q25" / "q25-model-assets").glob("*.bb")).read_text()
    assert "${@bb.utils" not in recipe and 'mkdirhier("' not in recipe and "mkdirhier(_/tmp/x_)" in recipe
    assert "# q25deploy: the model name has characters a recipe cannot hold safely" in recipe
    summary = next(line for line in recipe.splitlines() if line.startswith("SUMMARY"))
    assert summary.endswith('q__{@bb.utils.mkdirhier(_/tmp/x_)}__"')
