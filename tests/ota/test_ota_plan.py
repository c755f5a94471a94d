"""The OTA plan (q25deploy/ota/plan.py): what the board's root-run script will be told."""

from __future__ import annotations

import json
import shutil

import pytest

from q25deploy.board.boardfile import load_board
from q25deploy.builddir import BuildDir
from q25deploy.errors import PackageError, SchemaError
from q25deploy.ota.plan import plan_package
from q25deploy.resources import data_dir
from q25deploy.tokenizer.prompts import SMOKE_PROMPTS

IDS = [[1]] * len(SMOKE_PROMPTS)


@pytest.mark.parametrize("q25tok", ["/bin/rm", "/usr/bin/q25tok-old", "/usr/bin/../bin/q25tok"])
def test_the_plan_names_only_a_plain_q25tok(builds, q25tok):
    """The board runs the plan's q25tok as root for its smoke test; a path to another program
    (`/bin/rm info IMAGE`) or one that climbs is refused when the artifact is made."""
    with pytest.raises(PackageError, match="q25tok"):
        plan_package(builds["qemu"], target="qemu", install_dir="/lib/firmware/q25", q25tok=q25tok, smoke_ids=IDS)


def test_a_plain_q25tok_is_planned(builds):
    plan = plan_package(
        builds["qemu"], target="qemu", install_dir="/lib/firmware/q25", q25tok="/opt/q25/bin/q25tok", smoke_ids=IDS
    )
    assert plan.q25tok == "/opt/q25/bin/q25tok"


def planned(builds, **kw):
    """The qemu build's plan with the layer's install dir and q25tok, and ``kw``."""
    return plan_package(
        builds["qemu"], target="qemu", install_dir="/lib/firmware/q25", q25tok="/usr/bin/q25tok", smoke_ids=IDS, **kw
    )


def test_a_full_plan_names_the_regions_the_board_must_reserve(builds):
    """The board checks its running device tree against these lines before staging; a
    tokenizer-only plan keeps the current release's regions and has none."""
    import json

    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    plan = planned(builds)
    text = plan.files[0].data.decode()
    assert "\ndevice_tree /proc/device-tree\nmemory /dev/mem\nunreserved refuse\n" in text
    assert [ln for ln in text.splitlines() if ln.startswith("region ")] == [
        f"region {r['node']} {r['base']:016x} {r['size']:016x}" for r in pmap["regions"]
    ]
    assert pmap["regions"] and plan.regions == tuple(
        {k: r[k] for k in ("node", "base", "size")} for r in pmap["regions"]
    )
    tok = planned(builds, tokenizer_only=True, allow_unreserved=True).files[0].data.decode()
    assert "region " not in tok and "\nunreserved allow\n" in tok


@pytest.mark.parametrize("memory", ["/lib/firmware/q25/mem", "dev/mem", "/dev/../mem"])
def test_the_memory_device_is_a_plain_path_outside_the_install_dir(builds, memory):
    with pytest.raises(PackageError, match="memory device"):
        planned(builds, memory=memory)


def moved(builds, tmp_path, base: int):
    """The qemu build with its first region moved to ``base``, consistently: the partition map
    and the region table both name it ``q25-region0@<base>`` there."""
    b = tmp_path / "moved"
    shutil.copytree(builds["qemu"], b)
    pmap = json.loads((b / "partition_map.json").read_text())
    r = pmap["regions"][0]
    old_node, old_base = r["node"], r["base"]
    r["node"], r["base"] = f"q25-region0@{base:x}", base
    (b / "partition_map.json").write_text(json.dumps(pmap))
    table = b / "partitions" / "regions.tab"
    table.write_text(table.read_text().replace(f"{old_node} {old_base:#x}", f"{r['node']} {base:#x}"))
    return b


@pytest.mark.parametrize(
    ("base", "why"),
    [(0x48000000, "overlaps qemu's reserved qemu-initrd-and-dtb"), (0x10_0000_0000, "not inside one of qemu's")],
)
def test_a_region_off_the_board_files_free_memory_is_not_packaged(builds, tmp_path, base, why):
    """Regions are ours by place (issue 33, item 4): a build whose region lies on the board
    file's [[memory.reserved]] (the kernel's initrd and DTB here) or outside its banks is
    refused by the package plan and by the build's check for that board, in one line."""
    b = moved(builds, tmp_path, base)
    board = load_board(data_dir("targets") / "qemu.toml")
    with pytest.raises(PackageError, match=why):
        plan_package(
            b, target="qemu", install_dir="/lib/firmware/q25", q25tok="/usr/bin/q25tok", smoke_ids=IDS, board=board
        )
    with pytest.raises(SchemaError, match=why):
        BuildDir(b).check_for(board)
    BuildDir(builds["qemu"]).check_for(board)  # the build as made is ours there
