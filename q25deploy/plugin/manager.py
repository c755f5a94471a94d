"""Build the plugin manager (a factory: nothing happens at import time) and the target
registry. A plugin that fails to load, or whose hook raises, is reported by name and left
out; the rest of the CLI keeps working."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import cast

import pluggy

from ..board.boardfile import Board, load_board
from ..errors import UnknownTargetError
from . import defaults, hookspecs
from .hookspecs import ENTRY_POINT_GROUP, PROJECT, TargetSpec

DEFAULTS = "q25deploy.plugin.defaults"  # the core defaults' name in the manager


@dataclass(frozen=True)
class PluginFailure:
    plugin: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} failed: {self.error}"


@dataclass(frozen=True)
class Target:
    name: str
    plugin: str  # the plugin that registered it ("file": a board file only): its board hooks answer
    board: Board
    description: str


def describe_error(e: BaseException) -> str:
    """An exception as one line: ``TypeName: message``."""
    return " ".join(f"{type(e).__name__}: {e}".split())


def make_plugin_manager(entry_points: bool = True) -> tuple[pluggy.PluginManager, list[PluginFailure]]:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(defaults, name=DEFAULTS)
    failures: list[PluginFailure] = []
    if entry_points:
        eps = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
        seen = set()
        for ep in eps:
            if ep.name in seen or pm.has_plugin(ep.name):
                continue  # the same distribution seen twice on sys.path
            seen.add(ep.name)
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
                pm.check_pending()
            except Exception as e:  # a broken third-party plugin must not take the CLI down
                if pm.has_plugin(ep.name):
                    pm.unregister(name=ep.name)
                failures.append(PluginFailure(ep.name, describe_error(e)))
    return pm, failures


def plugin_versions(pm: pluggy.PluginManager) -> dict[str, str]:
    """Entry-point plugin name → "distribution version", for the loaded plugins (a build input)."""
    versions = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if pm.has_plugin(ep.name):
            dist = getattr(ep, "dist", None)
            versions[ep.name] = f"{dist.name} {dist.version}" if dist else "?"
    return dict(sorted(versions.items()))


def registered_targets(pm: pluggy.PluginManager, failures: list[PluginFailure]) -> dict[str, tuple[str, TargetSpec]]:
    """target name → (plugin name, spec), calling each plugin on its own."""
    out: dict[str, tuple[str, TargetSpec]] = {}
    for impl in reversed(pm.hook.q25deploy_register_targets.get_hookimpls()):
        try:
            specs: list[TargetSpec] = []
            for spec in cast("Iterable[object]", impl.function() or []):  # a plugin's answer: checked
                if not isinstance(spec, TargetSpec):
                    raise TypeError(f"q25deploy_register_targets returned {spec!r}, not a TargetSpec")
                specs.append(spec)
        except Exception as e:
            failures.append(PluginFailure(impl.plugin_name, describe_error(e)))
            continue
        for spec in specs:
            if spec.name in out:
                failures.append(
                    PluginFailure(
                        impl.plugin_name, f"target {spec.name!r} is already provided by plugin {out[spec.name][0]!r}"
                    )
                )
            else:
                out[spec.name] = (impl.plugin_name, spec)
    return dict(sorted(out.items()))


def resolve_target(
    pm: pluggy.PluginManager, failures: list[PluginFailure], name: str | None, target_file: str | None = None
) -> Target:
    """The target to build for: NAME's plugin and board file, or a user's board file
    (with NAME's plugin when NAME is also given, else the core defaults only)."""
    targets = registered_targets(pm, failures)
    if target_file:
        board = load_board(target_file)
        if name and name in targets:
            plugin, spec = targets[name]
            return Target(name, plugin, board, board.description)
        return Target(name or board.name, "file", board, board.description)
    if not name:
        raise UnknownTargetError("give --target NAME or --target-file FILE")
    if name not in targets:
        known = ", ".join(targets) or "none"
        broken = f"; broken plugins: {', '.join(f.plugin for f in failures)}" if failures else ""
        close = difflib.get_close_matches(name, list(targets), n=1)
        hint = f": did you mean {close[0]!r}?" if close else ""
        raise UnknownTargetError(f"unknown target {name!r}{hint} (known: {known}{broken})")
    plugin, spec = targets[name]
    board = load_board(spec.board_file)
    return Target(name, plugin, board, spec.description or board.description)
