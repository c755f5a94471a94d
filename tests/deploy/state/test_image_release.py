"""A board that runs its image's own assets: the layer's q25-model-assets installed into the
install directory (no deploy, no OTA install: no state file, no ``current``). ``smoke`` and
``status`` read that release from the package's ``assets_manifest.json`` (through the
schema); a later deploy takes over with ``current``. Against a real sshd on loopback; the
files laid out as the recipe's ``do_install`` lines say (the BitBake-built packages on the
emulated board: tests/packer/test_bitbake_board.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from deploy_helpers import INSTALL, board_argv, deploy

from q25deploy.cli import main
from q25deploy.resources import data_dir

_INSTALL_LINE = re.compile(r"^\s*install -m (0[0-7]{3}) \$\{S\}/(\S+) \$\{D\}\$\{Q25_INSTALL_DIR\}/(\S+)$", re.M)


def image_assets(build: Path, root: Path) -> Path:
    """The build's layer's q25-model-assets as its do_install puts them, under ``root``."""
    recipe_dir = build / "meta-q25" / "recipes-q25" / "q25-model-assets"
    (recipe,) = recipe_dir.glob("q25-model-assets_*.bb")
    lines = _INSTALL_LINE.findall(recipe.read_text())
    assert len(lines) >= 5, lines
    dest = root / INSTALL
    for mode, name, rel in lines:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(recipe_dir / "files" / name, dest / rel)
        (dest / rel).chmod(int(mode, 8))
    return dest


@pytest.fixture
def target(tmp_path, q25tok) -> Path:
    """The qemu board file with this machine's q25tok as the image's (the layer's runtime)."""
    f = tmp_path / "qemu-here.toml"
    text = (data_dir("targets") / "qemu.toml").read_text()
    f.write_text(text.replace('path = "/lib/firmware/q25"', f'path = "/lib/firmware/q25"\nruntime = "{q25tok}"'))
    return f


def run(capsys, argv: list[str]) -> tuple[int, list]:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out)


def argv(action: str, ssh, srv, root: Path, target: Path, *extra: str) -> list[str]:
    a = board_argv(action, ssh, srv, root, "--json", *extra)
    i = a.index("--target")
    return [*a[:i], "--target-file", str(target), *a[i + 2 :]]


def test_smoke_and_status_of_the_images_own_assets(tmp_path, capsys, ssh, models, target):
    srv, root = ssh["servers"][2], tmp_path / "board"
    assets = image_assets(models["A"], root)
    assert not (assets / "current").exists()
    code, res = run(capsys, argv("smoke", ssh, srv, root, target, "--build", str(models["A"])))
    assert code == 0 and res[0]["ok"] and res[0]["release"] == "image", res
    checks = {c["name"]: c for c in res[0]["smoke"]["checks"]}
    assert checks["partition sha256"]["ok"] and sum(n.startswith("encode") for n in checks) >= 7, checks
    # without a build: the host codec reads the board's image, checked against the package's digest
    code, res = run(capsys, argv("smoke", ssh, srv, root, target))
    assert code == 0 and res[0]["ok"], res
    code, res = run(capsys, argv("status", ssh, srv, root, target))
    assert code == 0 and res[0]["current"] is None and res[0]["consistent"], res
    assert res[0]["image"]["model_sha256"] == json.loads((models["A"] / "build.json").read_text())["model"]["sha256"]
    assert res[0]["residency"] == "not-reserved"  # this host's device tree reserves nothing
    # another vocabulary's build is refused by name
    code, res = run(capsys, argv("smoke", ssh, srv, root, target, "--build", str(models["C"])))
    assert code == 13 and "another vocabulary" in res[0]["error"], res


def test_a_tampered_image_and_a_bad_manifest_fail_in_one_line(tmp_path, capsys, ssh, models, target, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    srv, root = ssh["servers"][2], tmp_path / "board"
    assets = image_assets(models["A"], root)
    image = assets / "tokenizer.q25tokrt"
    data = bytearray(image.read_bytes())
    data[100] ^= 1
    image.write_bytes(bytes(data))
    code, res = run(capsys, argv("smoke", ssh, srv, root, target))
    assert code == 13 and "does not match its sha256" in res[0]["error"], res
    manifest = assets / "assets_manifest.json"
    doc = json.loads(manifest.read_text())
    doc["files"][0]["path"] = "/etc/shadow"
    manifest.write_text(json.dumps(doc))
    code, res = run(capsys, argv("smoke", ssh, srv, root, target))
    assert code == 13 and "assets_manifest.json" in res[0]["error"] and "files[0].path" in res[0]["error"], res
    manifest.unlink()
    code, res = run(capsys, argv("smoke", ssh, srv, root, target))
    assert code == 13 and "nothing is deployed" in res[0]["error"], res


def test_a_deploy_takes_over_from_the_images_assets(tmp_path, capsys, ssh, models, q25tok, target):
    srv, root = ssh["servers"][2], tmp_path / "board"
    image_assets(models["A"], root)
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0 and res[0]["ok"], res
    code, res = run(capsys, argv("smoke", ssh, srv, root, target, "--build", str(models["B"])))
    assert code == 0 and res[0]["ok"] and re.fullmatch(r"[0-9a-f]{16}", res[0]["release"]), res
