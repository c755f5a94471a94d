"""Board hooks reach only the target's plugin, and a plugin that raises fails only its board
(q25deploy/plugin/routing.py), driven through ``q25deploy build`` / ``targets`` / the smoke
checks with a third-party plugin "acme" registered beside the built-ins. Acme has no
``if target != NAME`` guard: it answers every hook it implements.

Every hook has a test of a plugin overriding it (``@overrides(hook)``), and a test checks that
no hook of ``hookspecs`` lacks one."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from q25deploy.board.dtsi import reserved_memory_dtsi
from q25deploy.board.plan import place_regions, plan_partitions
from q25deploy.cli import main as cli
from q25deploy.deploy.ops.smoke import _Report, plugin_checks, run_plugin_checks
from q25deploy.plugin import CommandSpec, ImageLayout, TargetSpec, hookimpl, hookspecs
from q25deploy.plugin import manager as plugin_manager
from q25deploy.plugin.routing import ANSWERS, BOARD_HOOKS, BROADCAST
from q25deploy.resources import data_dir

OVERRIDES: dict[str, Callable[..., None]] = {}


def overrides(hook: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as the one that shows a plugin overriding ``hook``."""

    def mark(test: Callable[..., None]) -> Callable[..., None]:
        OVERRIDES[hook] = test
        return test

    return mark


class Acme:
    """Registers target "acme" (the KV260's board file) and answers every board hook, unguarded."""

    @hookimpl
    def q25deploy_register_targets(self):
        return [TargetSpec("acme", data_dir("targets") / "kv260.toml", "ACME test board")]

    @hookimpl
    def q25deploy_image_layout(self, target, board):
        return ImageLayout(alignment=16384, install_dir="/opt/acme")

    @hookimpl
    def q25deploy_partition_plan(self, target, board, tensors):  # one tensor per partition
        return plan_partitions(tensors, replace(board, layout=replace(board.layout, region_max_size=1)))

    @hookimpl
    def q25deploy_reserved_regions(self, target, board, partitions):  # the low bank, not the high one
        return place_regions(replace(board, banks=board.banks[:1]), partitions)

    @hookimpl
    def q25deploy_reserved_memory_dtsi(self, target, board, plan):
        return reserved_memory_dtsi(board, plan) + "/* acme */\n"

    @hookimpl
    def q25deploy_layer_files(self, target, board, build):
        return {"conf/acme.conf": b"ACME = '1'\n"}

    @hookimpl
    def q25deploy_smoke_checks(self, target, board):
        return [("acme fpga", "true")]

    @hookimpl
    def q25deploy_cli_commands(self):
        return [CommandSpec("acme-hello", "say hello (test plugin)", "Say hello.", lambda p: None, _hello)]


def _hello(args, context):
    print(f"hello from {context.plugin}")


def acme_with(hook: str, function: Callable[..., object], **marks: bool) -> object:
    """A plugin "acme" that registers its target and has ``function`` as ``hook`` (an
    implementation may take none of the spec's arguments)."""
    ns = {"q25deploy_register_targets": Acme.q25deploy_register_targets, hook: hookimpl(function, **marks)}
    return type("Acme", (), ns)()


def raising(hook: str) -> object:
    def broken(self):
        raise RuntimeError(f"acme's {hook} is broken")

    return acme_with(hook, broken)


@pytest.fixture
def with_plugin(monkeypatch, tmp_path):
    """``with_plugin(plugin)``: every manager the CLI makes has ``plugin`` registered as "acme"
    (not an entry point: no version in the plan cache's key, so each test has a cache of its own)."""
    make = plugin_manager.make_plugin_manager
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def use(plugin: object) -> None:
        def make_with(entry_points: bool = True):
            pm, failures = make(entry_points)
            pm.register(plugin, name="acme")
            return pm, failures

        monkeypatch.setattr(plugin_manager, "make_plugin_manager", make_with)

    return use


def build(tmp_path: Path, model: Path, target: str, capsys) -> tuple[int, dict, str, Path]:
    """``q25deploy build --target TARGET --json``: exit code, summary, stderr, output directory."""
    out = tmp_path / target
    code = cli(["build", "--target", target, "--model", str(model), "--out", str(out), "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else {}, captured.err, out


def _resolve(name: str):
    pm, failures = plugin_manager.make_plugin_manager()
    return pm, plugin_manager.resolve_target(pm, failures, name)


@pytest.fixture(scope="module")
def kv260_alone(tmp_path_factory, qwen25_tiny) -> dict:
    """The kv260 build's summary and files with the built-in plugins only."""
    out = tmp_path_factory.mktemp("alone") / "kv260"
    assert cli(["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out), "--json"]) == 0
    return {"dtsi": (out / "reserved-memory.dtsi").read_text(), "layer": sorted(_layer(out))}


def _layer(out: Path) -> list[str]:
    return [str(p.relative_to(out)) for p in (out / "meta-q25").rglob("*") if p.is_file()]


def test_an_unguarded_plugin_leaves_other_boards_alone(with_plugin, tmp_path, qwen25_tiny, capsys, kv260_alone):
    with_plugin(Acme())
    code, summary, err, out = build(tmp_path, qwen25_tiny, "kv260", capsys)
    assert code == 0, err
    assert summary["plugin"] == "kv260" and summary["image"]["install_dir"] != "/opt/acme"
    assert (out / "reserved-memory.dtsi").read_text() == kv260_alone["dtsi"]
    assert "xmutil" in kv260_alone["dtsi"] and "acme" not in kv260_alone["dtsi"]  # kv260's own answer
    assert sorted(_layer(out)) == kv260_alone["layer"]
    pm, kv = _resolve("kv260")
    assert plugin_checks(pm, kv) == []  # acme's smoke check is not kv260's


@overrides("q25deploy_image_layout")
def test_image_layout_override(with_plugin, tmp_path, qwen25_tiny, capsys):
    with_plugin(Acme())
    code, summary, err, out = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 0, err
    assert summary["plugin"] == "acme"
    assert summary["image"]["install_dir"] == "/opt/acme" and summary["image"]["alignment"] == 16384


@overrides("q25deploy_partition_plan")
def test_partition_plan_override(with_plugin, tmp_path, qwen25_tiny, capsys, kv260_alone):
    with_plugin(Acme())
    code, summary, err, _ = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 0, err
    regions = summary["memory"]["regions"]
    assert len(regions) > 1  # one tensor each: the default packs the tiny model into one region
    code, kv, err, _ = build(tmp_path, qwen25_tiny, "kv260", capsys)
    assert code == 0 and len(kv["memory"]["regions"]) == 1, err


@overrides("q25deploy_reserved_regions")
def test_reserved_regions_override(with_plugin, tmp_path, qwen25_tiny, capsys):
    with_plugin(Acme())
    code, summary, err, _ = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 0, err
    code, kv, err, _ = build(tmp_path, qwen25_tiny, "kv260", capsys)
    assert code == 0, err
    assert all(r["base"] < 0x80000000 for r in summary["memory"]["regions"])  # the low bank
    assert all(r["base"] >= 0x800000000 for r in kv["memory"]["regions"])  # the high bank


@overrides("q25deploy_reserved_memory_dtsi")
def test_reserved_memory_dtsi_override(with_plugin, tmp_path, qwen25_tiny, capsys):
    with_plugin(Acme())
    code, _, err, out = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 0, err
    dtsi = (out / "reserved-memory.dtsi").read_text()
    assert dtsi.endswith("/* acme */\n") and "xmutil" not in dtsi  # acme's answer, not kv260's


@overrides("q25deploy_layer_files")
def test_layer_files_override(with_plugin, tmp_path, qwen25_tiny, capsys, kv260_alone):
    with_plugin(Acme())
    code, _, err, out = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 0, err
    assert (out / "meta-q25" / "conf" / "acme.conf").read_bytes() == b"ACME = '1'\n"
    assert "meta-q25/conf/acme.conf" not in kv260_alone["layer"]


class Board:
    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, argv, *, check=True, timeout=0):
        self.commands.append(list(argv))
        return (0, b"", b"")


@overrides("q25deploy_smoke_checks")
def test_smoke_checks_override(with_plugin):
    with_plugin(Acme())
    pm, acme = _resolve("acme")
    report, board = _Report(False), Board()
    run_plugin_checks(board, report, plugin_checks(pm, acme))
    assert [(c["name"], c["ok"]) for c in report.checks] == [("acme fpga", True)]
    assert board.commands == [["sh", "-c", "true"]]
    _, kv = _resolve("kv260")
    assert plugin_checks(pm, kv) == []  # kv260's smoke test does not run acme's check


@overrides("q25deploy_register_targets")
def test_register_targets_override(with_plugin, capsys):
    with_plugin(Acme())
    assert cli(["targets", "--json"]) == 0
    targets = {t["name"]: t["plugin"] for t in json.loads(capsys.readouterr().out)["targets"]}
    assert targets["acme"] == "acme" and targets["kv260"] == "kv260"


@overrides("q25deploy_cli_commands")
def test_cli_commands_override(with_plugin, capsys):
    with_plugin(Acme())
    assert cli(["acme-hello"]) == 0
    assert capsys.readouterr().out == "hello from acme\n"


def test_every_hook_has_an_override_test():
    hooks = {name for name in vars(hookspecs) if name.startswith("q25deploy_")}
    assert set(OVERRIDES) == hooks, f"hooks without an override test: {sorted(hooks - set(OVERRIDES))}"
    assert BOARD_HOOKS | BROADCAST == hooks and not BOARD_HOOKS & BROADCAST


@pytest.mark.parametrize("hook", sorted(BOARD_HOOKS - {"q25deploy_smoke_checks"}))
def test_a_raising_build_hook_names_the_plugin_and_fails_only_its_board(
    hook, with_plugin, tmp_path, qwen25_tiny, capsys
):
    with_plugin(raising(hook))
    code, _, err, out = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 14 and not out.exists()
    assert err == (
        f"q25deploy: error: plugin 'acme' failed in {hook} for target 'acme': RuntimeError: acme's {hook} is broken\n"
    )
    code, summary, err, _ = build(tmp_path, qwen25_tiny, "kv260", capsys)
    assert code == 0 and summary["plugin"] == "kv260", err


def test_a_raising_smoke_check_hook_is_its_boards_failed_check_only(with_plugin):
    hook = "q25deploy_smoke_checks"
    with_plugin(raising(hook))
    pm, acme = _resolve("acme")
    report = _Report(False)
    run_plugin_checks(Board(), report, plugin_checks(pm, acme))
    assert report.checks == [
        {
            "name": "plugin checks",
            "ok": False,
            "detail": f"plugin 'acme' failed in {hook} for target 'acme': RuntimeError: acme's {hook} is broken",
        }
    ]
    _, kv = _resolve("kv260")
    assert plugin_checks(pm, kv) == []


def test_a_raising_hook_stops_a_deploy_to_its_board_in_one_line(with_plugin, tmp_path, qwen25_tiny, capsys):
    with_plugin(Acme())
    code, _, err, out = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 0, err
    with_plugin(raising("q25deploy_image_layout"))  # the deploy's managers: the broken acme
    code = cli(["deploy", "--target", "acme", "--build", str(out), "--host", "127.0.0.1:1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 14, err
    assert err.startswith("q25deploy: error: plugin 'acme' failed in q25deploy_image_layout for target 'acme': ")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("hook", sorted(ANSWERS))
def test_an_answer_of_the_wrong_type_names_the_plugin(hook, with_plugin, tmp_path, qwen25_tiny, capsys):
    with_plugin(acme_with(hook, lambda self: 42))
    code, _, err, _ = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 14, err
    assert (
        err
        == f"q25deploy: error: plugin 'acme' failed in {hook} for target 'acme': it answered 42, not {ANSWERS[hook][1]}\n"
    )


def test_a_hook_wrapper_is_refused_by_name(with_plugin, tmp_path, qwen25_tiny, capsys):
    def wrapper(self):
        yield

    with_plugin(acme_with("q25deploy_image_layout", wrapper, wrapper=True))
    code, _, err, _ = build(tmp_path, qwen25_tiny, "acme", capsys)
    assert code == 14, err
    assert err.endswith("failed in q25deploy_image_layout for target 'acme': board hooks do not run hook wrappers\n")
