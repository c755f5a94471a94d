"""Plugin-provided commands (hook ``q25deploy_cli_commands``): a real out-of-tree plugin's
command runs through the console script, and plugins whose commands are broken in every way —
the hook raises, add_arguments raises, run raises, a taken name — are reported by name while
everything else keeps working."""

from __future__ import annotations

import json
import types

from q25deploy.plugin import CommandSpec, hookimpl
from q25deploy.plugin.commands import collect_commands
from q25deploy.plugin.manager import make_plugin_manager

BROKEN_WARNINGS = [
    "plugin 'broken' failed: ModuleNotFoundError",
    "plugin 'raisecmd' failed: RuntimeError: raisecmd cannot list its commands",
    "plugin 'badcmd' failed: command 'build' is already provided by the core",
    "plugin 'badcmd' failed: command 'badcmd-args': ArgumentError",
]


def test_help_lists_plugin_commands_and_reports_the_broken_ones(q25_site):
    r = q25_site("--help")
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("exit codes:")[0]
    assert "ultra96-info" in listed and "qemu" in listed and "badcmd-run" in listed
    assert "badcmd-args" not in listed  # its arguments could not be added: left out
    lines = r.stderr.splitlines()
    assert all(line.startswith("q25deploy: warning: plugin '") for line in lines), r.stderr
    for warning in BROKEN_WARNINGS:
        assert any(warning in line for line in lines), (warning, r.stderr)
    assert "Traceback" not in r.stderr


def test_an_out_of_tree_plugin_command_runs(q25_site):
    r = q25_site("ultra96-info", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "plugin": "ultra96",
        "target": "ultra96",
        "banks": [{"bank": "lpddr4", "base": 0, "size": 0x80000000}],
    }
    r = q25_site("ultra96-info", "--bank", "hbm")  # the plugin's own user error: one line, exit 2
    assert (
        r.returncode == 2
        and r.stderr.splitlines()[-1] == "q25deploy: error: no DDR bank 'hbm' on ultra96 (banks: lpddr4)"
    )
    r = q25_site("ultra96-info", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: q25deploy ultra96-info") and "--bank NAME" in r.stdout


def test_a_plugin_command_that_crashes_is_named_without_a_traceback(q25_site):
    r = q25_site("badcmd-run")
    assert r.returncode == 70
    assert r.stderr.splitlines()[-1] == (
        "q25deploy: plugin 'badcmd' failed in 'badcmd-run': RuntimeError: the vendor's "
        "tool is not installed (set Q25DEPLOY_DEBUG=1 for a traceback)"
    )
    assert "Traceback" not in r.stderr
    r = q25_site("badcmd-args")  # left out: a usage error that names the nearest command there is
    assert r.returncode == 2 and "unknown command 'badcmd-args': did you mean 'badcmd-run'?" in r.stderr


def test_core_commands_work_and_load_no_plugin_to_parse(q25_site, tmp_path):
    r = q25_site("build", "--help")  # the clash did not replace the core's build
    assert r.returncode == 0 and "Clashes" not in r.stdout and r.stderr == ""
    r = q25_site("targets")
    assert r.returncode == 0 and "ultra96" in r.stdout
    assert r.stderr.count("\n") == 1 and "plugin 'broken' failed" in r.stderr  # reported once


def _plugin(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(mod, hook, hookimpl(fn))
    return mod


def _spec(name: str) -> CommandSpec:
    return CommandSpec(name, "help", "description", lambda parser: None, lambda args, context: 0)


def test_collect_commands_isolates_each_plugin():
    pm, failures = make_plugin_manager(entry_points=False)
    pm.register(_plugin("a", q25deploy_cli_commands=lambda: [_spec("a-one"), _spec("shared")]), name="a")
    pm.register(_plugin("b", q25deploy_cli_commands=lambda: [_spec("shared"), _spec("b-one")]), name="b")
    pm.register(_plugin("c", q25deploy_cli_commands=lambda: ["not a spec"]), name="c")
    pm.register(_plugin("d", q25deploy_cli_commands=lambda: [_spec("Bad Name")]), name="d")
    pm.register(_plugin("e", q25deploy_cli_commands=lambda: 1 / 0), name="e")
    pm.register(_plugin("f", q25deploy_cli_commands=lambda: [_spec("deploy")]), name="f")
    got = collect_commands(pm, failures, taken=["deploy"])
    # plugins are asked in pluggy's call order (the last registered first), as for targets
    assert [(plugin, spec.name) for plugin, spec in got] == [("b", "shared"), ("b", "b-one"), ("a", "a-one")]
    assert sorted((f.plugin, f.error.split(":")[0]) for f in failures) == [
        ("a", "command 'shared' is already provided by 'b'"),
        ("c", "TypeError"),
        ("d", "ValueError"),
        ("e", "ZeroDivisionError"),
        ("f", "command 'deploy' is already provided by the core"),
    ]
