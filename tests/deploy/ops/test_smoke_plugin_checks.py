"""The target's plugin's extra smoke checks (q25deploy/deploy/ops/smoke.py): a hook that raises or
answers something other than (name, shell command) is each board's one failed check naming the
plugin, never an exception out of the board's run (``internal error``, exit 70); a good check
runs on the board and fails on a non-zero exit; another plugin's checks are not run."""

from __future__ import annotations

import pluggy

from q25deploy.deploy.ops.smoke import _Report, plugin_checks, run_plugin_checks
from q25deploy.plugin import hookspecs
from q25deploy.plugin.hookspecs import PROJECT

hookimpl = pluggy.HookimplMarker(PROJECT)


class Target:
    name, plugin, board = "qemu", "qemu", None


class ScriptedSession:
    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, argv, *, check=True, timeout=0):
        self.commands.append(list(argv))
        return (0 if argv[-1] == "true" else 1, b"", b"no such thing\n")


def manager(*plugins) -> pluggy.PluginManager:
    """The first plugin is the target's (``qemu``), the others are other boards' plugins."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for i, p in enumerate(plugins):
        pm.register(p, name="qemu" if i == 0 else f"other{i}")
    return pm


class Good:
    @hookimpl
    def q25deploy_smoke_checks(self, target, board):
        return [("fpga bitstream", "true"), ("fpga clock", "false")]


class Odd:
    @hookimpl
    def q25deploy_smoke_checks(self, target, board):
        return [("only a name",), "a string"]


class Raises:
    @hookimpl
    def q25deploy_smoke_checks(self, target, board):
        raise KeyError("board.fpga")


def checks_of(*plugins) -> tuple[list[dict], ScriptedSession]:
    report, board = _Report(False), ScriptedSession()
    run_plugin_checks(board, report, plugin_checks(manager(*plugins), Target()))
    return report.checks, board


def test_good_checks_run_on_the_board():
    checks, board = checks_of(Good())
    assert [(c["name"], c["ok"]) for c in checks] == [("fpga bitstream", True), ("fpga clock", False)]
    assert checks[1]["detail"] == "no such thing" and board.commands == [["sh", "-c", "true"], ["sh", "-c", "false"]]


def test_a_malformed_answer_is_a_named_failed_check():
    checks, board = checks_of(Odd())
    assert checks == [
        {
            "name": "plugin checks",
            "ok": False,
            "detail": "q25deploy_smoke_checks of plugin 'qemu' gave ('only a name',), not (name, shell command)",
        },
        {
            "name": "plugin checks",
            "ok": False,
            "detail": "q25deploy_smoke_checks of plugin 'qemu' gave 'a string', not (name, shell command)",
        },
    ]
    assert board.commands == []


def test_a_hook_that_raises_is_a_named_failed_check():
    checks, _ = checks_of(Raises(), Good())
    assert checks == [
        {
            "name": "plugin checks",
            "ok": False,
            "detail": "plugin 'qemu' failed in q25deploy_smoke_checks for target 'qemu': KeyError: 'board.fpga'",
        }
    ]


def test_another_plugins_checks_are_not_run():
    checks, board = checks_of(Good(), Raises())
    assert [c["name"] for c in checks] == ["fpga bitstream", "fpga clock"]
