"""Plugins for real: the built-ins through their entry points, an out-of-tree plugin and a
broken one installed with pip into a scratch site directory (conftest.py), driven through the CLI."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from q25deploy.plugin import hookspecs
from q25deploy.plugin.manager import (
    make_plugin_manager,
    registered_targets,
    resolve_target,
)
from q25deploy.plugin.routing import BOARD_HOOKS, board_hooks

HERE = Path(__file__).parent


def test_hookspecs_are_prefixed_typed_and_documented():
    names = [n for n in dir(hookspecs) if n.startswith("q25deploy_")]
    # the docs cannot drift from the code: docs/plugins.md's table lists exactly these hooks
    docs = (HERE.parents[1] / "docs" / "plugins.md").read_text()
    documented = set(re.findall(r"^\| `(q25deploy_\w+)\(", docs, re.M))
    assert set(names) == documented
    for n in names:
        fn = getattr(hookspecs, n)
        assert fn.__doc__ and ("*firstresult*" in fn.__doc__ or "*collect*" in fn.__doc__), n
        assert fn.__annotations__.get("return"), n
        routed = "board" if n in BOARD_HOOKS else "broadcast"  # how routing.py calls it, stated
        assert f"*{routed}*" in fn.__doc__, n
        assert re.search(rf"^\| `{n}\(.*?\)` \| \w+, {routed} \|", docs, re.M), n


def test_hookspecs_import_no_module_of_the_plugin_package():
    # plugin.commands (and the manager) import hookspecs: an import back would be a circle
    tree = ast.parse(Path(hookspecs.__file__).read_text())
    assert [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1] == []


def test_builtin_targets_come_from_entry_points():
    pm, failures = make_plugin_manager()
    targets = registered_targets(pm, failures)
    assert {"kv260", "zcu104", "qemu"} <= set(targets)
    assert all(targets[n][0] == n for n in ("kv260", "zcu104", "qemu"))
    assert not [f for f in failures if f.plugin in ("kv260", "zcu104", "qemu")]
    pm2, _ = make_plugin_manager(entry_points=False)
    assert registered_targets(pm2, []) == {}  # nothing is registered at import time


def test_plugin_override_applies_to_its_own_target_only():
    pm, failures = make_plugin_manager()
    kv = resolve_target(pm, failures, "kv260")
    zc = resolve_target(pm, failures, "zcu104")
    from q25deploy.board.plan import plan_memory

    assert "xmutil" in board_hooks(pm, kv).q25deploy_reserved_memory_dtsi(
        board=kv.board, plan=plan_memory([], kv.board)
    )
    assert "xmutil" not in board_hooks(pm, zc).q25deploy_reserved_memory_dtsi(
        board=zc.board, plan=plan_memory([], zc.board)
    )


def test_targets_lists_the_out_of_tree_plugin_and_survives_a_broken_one(q25_site):
    r = q25_site("targets", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    by_name = {t["name"]: t["plugin"] for t in data["targets"]}
    assert by_name["ultra96"] == "ultra96" and by_name["kv260"] == "kv260"
    assert [f["plugin"] for f in data["failed_plugins"]] == ["broken"]
    assert "q25deploy_this_dependency_is_missing" in data["failed_plugins"][0]["error"]
    assert r.stderr.count("\n") == 1 and "plugin 'broken' failed" in r.stderr


def test_build_for_the_out_of_tree_board(q25_site, tmp_path, qwen25_tiny):
    r = q25_site("build", "--target", "ultra96", "--model", qwen25_tiny, "--out", tmp_path / "u96", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["plugin"] == "ultra96"
    assert summary["image"]["install_dir"] == "/opt/q25" and summary["image"]["alignment"] == 16384
    img = json.loads((tmp_path / "u96" / "tokenizer" / "tokenizer_runtime_image_manifest.json").read_text())
    assert all(s["offset"] % 16384 == 0 for s in img["sections"])
    assert summary["memory"]["regions"][0]["base"] < 0x7FF00000
    # the broken plugin did not stop the build
    assert "plugin 'broken' failed" in r.stderr
