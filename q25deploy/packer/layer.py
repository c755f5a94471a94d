"""The BitBake layer (``meta-q25/``) written into every build.

Static parts are copied from the templates in the repository's ``recipes/meta-q25``
(runtime recipe with the C sources, packagegroup, ``layer.conf``, licence); generated parts
are filled in here (model-assets recipe, layer README, oeqa smoke test); machine-specific
parts (device tree) come from the ``q25deploy_layer_files`` hook, whose core default is
:func:`device_tree_files`. Large files (partitions) enter the layer as hard links to the
build's own copies, so weights are stored once. See docs/layer.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .. import schema
from ..board.boardfile import Board
from ..common import json_bytes
from ..errors import LicenseError, Q25Error
from ..layout import ASSETS_MANIFEST
from ..resources import data_dir, is_build_product
from .recipe_text import bitbake_text, replaced_note

LAYER = "meta-q25"
ASSETS_RECIPE = "recipes-q25/q25-model-assets"
PACKAGEGROUP = "recipes-q25/packagegroups"
LICENSE_FILE = "MODEL-LICENSE"
MEMORY_HEADER = "q25_memory_map.h"  # installed to ${includedir} only (the -dev package)
# meta-xilinx-core's device-tree recipe is appended only when that layer is present
# (BBFILES_DYNAMIC in conf/layer.conf)
DEVICE_TREE_DIR = "dynamic-layers/xilinx/recipes-bsp/device-tree"
DTSI = "q25-reserved-memory.dtsi"
# meta-xilinx-core's device-tree recipe #includes each file of one variable into the base
# device tree (and adds it to SRC_URI): EXTRA_OVERLAYS up to rel-v2024.1 (langdale: PetaLinux
# 2023.1-2024.1), EXTRA_DT_INCLUDE_FILES since scarthgap. Each release reads only its own name,
# so the bbappend sets both and the fragment is included once on either.
DT_INCLUDE_VARS = ("EXTRA_OVERLAYS", "EXTRA_DT_INCLUDE_FILES")
TEMPLATE_SUFFIX = ".in"
_PLACEHOLDER = re.compile(r"@@([A-Z0-9_]+)@@")
# licence ids OE-core ships texts for (others need NO_GENERIC_LICENSE)
_COMMON = {
    "apache-2.0": "Apache-2.0",
    "mit": "MIT",
    "bsd-2-clause": "BSD-2-Clause",
    "bsd-3-clause": "BSD-3-Clause",
    "gpl-2.0-only": "GPL-2.0-only",
    "gpl-3.0-only": "GPL-3.0-only",
    "cc-by-4.0": "CC-BY-4.0",
}
# licence texts q25deploy ships for models that name an id but carry no text
_SHIPPED_TEXTS = {"Apache-2.0": "Apache-2.0"}


@dataclass(frozen=True)
class Licence:
    """The model's licence as the recipe states it."""

    id: str  # LICENSE value
    text: bytes  # the licence text shipped in the recipe
    no_generic: bool  # OE-core has no generic text for this id (NO_GENERIC_LICENSE)


@dataclass(frozen=True)
class LayerFile:
    path: str  # inside the layer
    data: bytes | None = None
    link: Path | None = None  # hard-link this file instead of writing data
    sha256: str | None = None  # of the linked file, when known


def render(template: str, values: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) not in values:
            raise KeyError(f"template placeholder @@{m.group(1)}@@ has no value")
        return values[m.group(1)]

    return _PLACEHOLDER.sub(sub, template)


def template_root() -> Path:
    return data_dir("recipes") / LAYER


def model_license(model: dict, license_id: str | None = None, license_file: str | None = None) -> Licence:
    """The model's licence for the recipe, never a guess (``model``: ``license``, the GGUF's
    ``general.license``, and ``ollama``, the Ollama source's layers).

    The id: ``--model-license``, else GGUF ``general.license``. The text:
    ``--model-license-file``, else the Ollama licence layer, else a text q25deploy ships for
    that id."""
    raw_id = license_id or model.get("license")
    if not raw_id:
        raise LicenseError(
            "the model names no licence (GGUF general.license); give --model-license ID "
            "(and --model-license-file FILE) for the layer's recipe"
        )
    canonical = _COMMON.get(raw_id.lower(), re.sub(r"[^A-Za-z0-9.+-]", "-", raw_id))
    if license_file:
        try:
            text = Path(license_file).read_bytes()
        except OSError as e:
            raise LicenseError(f"{license_file}: cannot read the licence file: {e.strerror}") from None
    elif (model.get("ollama") or {}).get("license"):
        text = model["ollama"]["license"].encode("utf-8")
    elif canonical in _SHIPPED_TEXTS:
        text = (Path(__file__).resolve().parent.parent / "data" / "licenses" / _SHIPPED_TEXTS[canonical]).read_bytes()
    else:
        raise LicenseError(
            f"the model's licence {raw_id!r} comes with no text (no Ollama licence layer); "
            "give --model-license-file FILE"
        )
    return Licence(canonical, text, raw_id.lower() not in _COMMON)


def machines(board: Board) -> tuple[str, ...]:
    """The board's Yocto MACHINE names (board.yocto_machine), else its name."""
    return board.yocto_machines or (board.name,)


def device_tree_files(board: Board, dtsi: str) -> dict[str, bytes | None]:
    """The core default of the device-tree part: a bbappend for the board's MACHINEs + the dtsi."""
    tpl = (template_root() / DEVICE_TREE_DIR / f"device-tree.bbappend{TEMPLATE_SUFFIX}").read_text()
    names, parts = machines(board), []
    for i, m in enumerate(names):
        value = f" {DTSI}"
        if i:  # once only, also when MACHINEOVERRIDES holds an earlier name too
            # no braces inside ${@...}: BitBake 2.2 (langdale) ends the expression at the first "}"
            earlier = "".join(f"{e!r}, " for e in names[:i])
            value = f" ${{@'' if set(d.getVar('MACHINEOVERRIDES').split(':')).intersection(({earlier})) else '{DTSI}'}}"
        parts.append(f'\nFILESEXTRAPATHS:prepend:{m} := "${{THISDIR}}/files:"')
        for var in DT_INCLUDE_VARS:
            parts.append(
                f"# nooelint: oelint.vars.mispell.unknown - {var} belongs to meta-xilinx's "
                "device-tree recipe, not to OE-core\n"
                f'{var}:append:{m} = "{value}"'
            )
    text = render(tpl, {"BOARD": board.name, "MACHINES": ", ".join(names), "MACHINE_OVERRIDES": "\n".join(parts)})
    return {
        f"{DEVICE_TREE_DIR}/device-tree.bbappend": text.encode(),
        f"{DEVICE_TREE_DIR}/files/{DTSI}": dtsi.encode(),
    }


def compatible_machine(board: Board) -> str:
    """COMPATIBLE_MACHINE of the board's recipes: exactly its MACHINE names (plain, checked
    by the board file loader)."""
    return "^(" + "|".join(machines(board)) + ")$"


def assets_pv(release: int, manifest: bytes) -> str:
    """``1.<release>+q25.<hash>``: the release orders builds (bb.utils.vercmp_string, opkg, dnf),
    the hash of the assets manifest tells contents of one release apart."""
    return f"1.{release}+q25.{hashlib.sha256(manifest).hexdigest()[:12]}"


def static_files() -> list[LayerFile]:
    """The layer's fixed files (templates' non-``.in`` files, runtime sources without build products)."""
    root = template_root()
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_dir() or rel.endswith(TEMPLATE_SUFFIX) or "__pycache__" in rel:
            continue
        if is_build_product(p):
            continue
        out.append(LayerFile(rel, p.read_bytes()))
    return out


def _install_dir_expr(path: str) -> str:
    for prefix, var in (
        ("/lib/firmware", "${nonarch_base_libdir}/firmware"),
        ("/usr/share", "${datadir}"),
        ("/opt", "/opt"),
    ):
        if path == prefix or path.startswith(prefix + "/"):
            return var + path[len(prefix) :]
    return path


def model_assets_files(
    board: Board, summary: dict, artifacts: dict[str, tuple[Path, str, int]], licence: Licence, release: int = 0
) -> list[LayerFile]:
    """The model-assets recipe and its files (hard links to the build's artifacts, given as
    rel → (path, sha256, size)); the memory-map header goes to ${includedir} only. Also the
    packagegroup: it is COMPATIBLE_MACHINE with the assets."""
    lic, lic_text, no_generic = licence.id, licence.text, licence.no_generic
    install_dir = summary["image"]["install_dir"]
    files: list[tuple[str, str]] = []  # (name in files/, path under the install dir)
    for rel in sorted(artifacts):
        name = Path(rel).name
        dest = f"partitions/{name}" if rel.startswith("partitions/") else name
        files.append((name, dest))
    entries = [
        {"path": f"{install_dir}/{dest}", "sha256": artifacts[rel][1], "size": artifacts[rel][2]}
        for (name, dest), rel in zip(files, sorted(artifacts))
        if name != MEMORY_HEADER
    ]
    assets_manifest = {
        "format": schema.ASSETS_FORMAT,
        "target": summary["target"],
        "model": {"name": summary["model"].get("name"), "sha256": summary["model"]["sha256"], "license": lic},
        "vocab_fingerprint": summary["image"]["vocab_fingerprint"],
        "files": entries,
    }
    manifest_bytes = json_bytes(assets_manifest)
    pv = assets_pv(release, manifest_bytes)
    src_names = sorted([n for n, _ in files] + [ASSETS_MANIFEST, LICENSE_FILE])
    install = [
        f"    install -m 0644 ${{S}}/{name} ${{D}}${{Q25_INSTALL_DIR}}/{dest}"
        for name, dest in files
        if name != MEMORY_HEADER
    ]
    install.append(f"    install -m 0644 ${{S}}/{ASSETS_MANIFEST} ${{D}}${{Q25_INSTALL_DIR}}/{ASSETS_MANIFEST}")
    tpl = (template_root() / ASSETS_RECIPE / f"q25-model-assets.bb{TEMPLATE_SUFFIX}").read_text()
    model_name, renamed = bitbake_text(summary["model"].get("name") or summary["model"]["reference"])
    recipe = replaced_note("model name", renamed) + render(
        tpl,
        {
            "BOARD": summary["target"],
            "MODEL_NAME": model_name,
            "MODEL_SHA256": summary["model"]["sha256"],
            "LICENSE": lic,
            "LICENSE_FILE": LICENSE_FILE,
            "LICENSE_MD5": hashlib.md5(lic_text).hexdigest(),
            "NO_GENERIC_LICENSE": f'NO_GENERIC_LICENSE[{lic}] = "{LICENSE_FILE}"\n' if no_generic else "",
            "SRC_URI": " \\\n           ".join(f"file://{n}" for n in src_names) + " \\\n          ",
            "INSTALL_DIR": _install_dir_expr(install_dir),
            "COMPATIBLE_MACHINE": compatible_machine(board),
            "INSTALL": "\n".join(install),
        },
    )
    group = (template_root() / PACKAGEGROUP / f"packagegroup-q25.bb{TEMPLATE_SUFFIX}").read_text()
    out = [
        LayerFile(f"{ASSETS_RECIPE}/q25-model-assets_{pv}.bb", recipe.encode()),
        LayerFile(
            f"{PACKAGEGROUP}/packagegroup-q25.bb",
            render(group, {"COMPATIBLE_MACHINE": compatible_machine(board)}).encode(),
        ),
        LayerFile(f"{ASSETS_RECIPE}/files/{LICENSE_FILE}", lic_text),
        LayerFile(f"{ASSETS_RECIPE}/files/{ASSETS_MANIFEST}", manifest_bytes),
    ]
    out += [
        LayerFile(f"{ASSETS_RECIPE}/files/{name}", link=artifacts[rel][0], sha256=artifacts[rel][1])
        for (name, _), rel in zip(files, sorted(artifacts))
    ]
    return out


def assets_recipe_pv(files: list[LayerFile]) -> str:
    """PV of the model-assets recipe among the layer's files (it is in the file name)."""
    prefix = f"{ASSETS_RECIPE}/q25-model-assets_"
    return next(f.path[len(prefix) : -3] for f in files if f.path.startswith(prefix) and f.path.endswith(".bb"))


def smoke_test_case(summary: dict, prompts: list[tuple[bytes, bool, list[int]]]) -> LayerFile:
    install_dir = summary["image"]["install_dir"]
    tpl = (template_root() / "lib" / "oeqa" / "runtime" / "cases" / f"q25_smoke.py{TEMPLATE_SUFFIX}").read_text()
    data = [[base64.b64encode(t).decode(), special, ids] for t, special, ids in prompts]
    text = render(
        tpl,
        {
            "BOARD": summary["target"],
            "IMAGE_PATH": f"{install_dir}/{Path(summary['image']['path']).name}",
            "ASSETS_MANIFEST_PATH": f"{install_dir}/{ASSETS_MANIFEST}",
            "PROMPTS_JSON": repr(json.dumps(data)),
            "FINGERPRINT": summary["image"]["vocab_fingerprint"],
        },
    )
    return LayerFile("lib/oeqa/runtime/cases/q25_smoke.py", text.encode())


def layer_readme(
    summary: dict, board: Board, has_device_tree: bool, *, pv: str, maintainer: str | None = None
) -> LayerFile:
    """The layer's README.md: what it holds, how to include it, and (yocto-check-layer's
    test_readme) its maintainer and where patches go."""
    tpl = (template_root() / f"README.md{TEMPLATE_SUFFIX}").read_text()
    names = ", ".join(f"`{m}`" for m in machines(board))
    dt = f"{DEVICE_TREE_DIR}/device-tree.bbappend"
    text = render(
        tpl,
        {
            "BOARD": board.name,
            "DESCRIPTION": board.description,
            "MACHINES": names,
            "MODEL": bitbake_text(summary["model"].get("name") or summary["model"]["reference"])[0],
            "MODEL_SHA256": summary["model"]["sha256"],
            "INSTALL_DIR": summary["image"]["install_dir"],
            "PV": pv,
            "MAINTAINER": maintainer
            or ("not named (`q25deploy build --layer-maintainer 'Name <address>'` names who answers for this layer)"),
            "DEVICE_TREE_ROW": (
                f"| `{dt}` | | adds `q25-reserved-memory.dtsi` to meta-xilinx's device tree "
                f"for MACHINE {names}; active only with meta-xilinx-core |\n"
                if has_device_tree
                else ""
            ),
            "PETALINUX_DEVICE_TREE": (
                f"4. Device tree: `{dt}` adds the reserved-memory fragment through meta-xilinx's\n"
                f"   `EXTRA_DT_INCLUDE_FILES` for MACHINE {names}: nothing to do by hand. Only where that\n"
                "   bbappend does not apply (no meta-xilinx, a custom device-tree flow) do it by hand, never\n"
                "   both (the fragment would be included twice): copy\n"
                f"   `{DEVICE_TREE_DIR}/files/q25-reserved-memory.dtsi` next to\n"
                "   `project-spec/meta-user/recipes-bsp/device-tree/files/system-user.dtsi`, add the line\n\n"
                '       /include/ "q25-reserved-memory.dtsi"\n\n'
                "   to `system-user.dtsi`, and add `file://q25-reserved-memory.dtsi` to `SRC_URI:append` in\n"
                "   `project-spec/meta-user/recipes-bsp/device-tree/device-tree.bbappend`."
                if has_device_tree
                else "4. Device tree: this layer changes none for this board (see the notes in\n"
                "   `reserved-memory.dtsi` of the build)."
            ),
            "YOCTO_DEVICE_TREE": (
                f"With meta-xilinx-core in BBLAYERS, `{dt}` adds the reserved memory to the device "
                f"tree of MACHINE {names}."
                if has_device_tree
                else "This board needs no device-tree recipe change (see the notes in "
                "`reserved-memory.dtsi` of the build)."
            ),
        },
    )
    return LayerFile("README.md", text.encode())


def layer_security(summary: dict, *, pv: str, maintainer: str | None = None) -> LayerFile:
    """The layer's SECURITY.md (yocto-check-layer's test_security, styhead and later): whom to
    report a vulnerability to, what runs as root, how a fix ships."""
    tpl = (template_root() / f"SECURITY.md{TEMPLATE_SUFFIX}").read_text()
    text = render(
        tpl,
        {
            "MAINTAINER": maintainer
            or ("not named (`q25deploy build --layer-maintainer 'Name <address>'` names whom to report to)"),
            "PV": pv,
            "MODEL_SHA256": summary["model"]["sha256"],
            "INSTALL_DIR": summary["image"]["install_dir"],
        },
    )
    return LayerFile("SECURITY.md", text.encode())


def merge_hook_results(results: list[dict | None]) -> dict[str, bytes | None]:
    """``q25deploy_layer_files`` results, core default first so plugins override it."""
    merged: dict[str, bytes | None] = {}
    for res in reversed(results):
        for path, data in (res or {}).items():
            if not isinstance(path, str) or path.startswith("/") or ".." in path.split("/"):
                raise Q25Error(f"a plugin returned an unsafe layer path {path!r}")
            merged[path] = data
    return merged


def write_layer(out, files: list[LayerFile]) -> None:
    """Put the layer's files into an :class:`~q25deploy.packer.outputs.OutputDir` under meta-q25/."""
    import os

    for f in sorted(files, key=lambda f: f.path):
        rel = f"{LAYER}/{f.path}"
        if f.link is not None:
            os.link(f.link, out.path(rel))
            out.record(rel, "bitbake-layer", sha256=f.sha256)
        else:
            out.write(rel, f.data or b"", "bitbake-layer")
