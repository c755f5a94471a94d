"""Plugin-provided CLI commands: collecting every plugin's :class:`CommandSpec` one plugin at a
time (a plugin that raises or answers nonsense is a :class:`PluginFailure`, the others go on)
and the :class:`CommandContext` a command's ``run`` receives."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

import pluggy

from .hookspecs import CommandSpec
from .manager import PluginFailure, Target, describe_error, resolve_target

COMMAND_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}\Z")


@dataclass
class CommandContext:
    """What a plugin command's ``run(args, context)`` gets besides its arguments."""

    plugin: str  # the name of the plugin that provides the command
    plugin_manager: pluggy.PluginManager
    failures: list[PluginFailure]  # plugin failures seen so far (already reported)
    report: Callable[[Iterable[PluginFailure]], None] = field(default=lambda failures: None, repr=False)

    def resolve_target(self, name: str | None, target_file: str | None = None) -> Target:
        """NAME's board (or a user's board file), as ``--target``/``--target-file`` give it;
        plugins failing on the way are reported."""
        seen = len(self.failures)
        try:
            return resolve_target(self.plugin_manager, self.failures, name, target_file)
        finally:
            self.report(self.failures[seen:])


def collect_commands(
    pm: pluggy.PluginManager, failures: list[PluginFailure], taken: Iterable[str] = ()
) -> list[tuple[str, CommandSpec]]:
    """(plugin name, spec) of every plugin command, calling each plugin on its own; ``taken``
    are the core's command names. Failures are appended to ``failures``."""
    owner = {name: "q25deploy" for name in taken}
    out: list[tuple[str, CommandSpec]] = []
    for impl in reversed(pm.hook.q25deploy_cli_commands.get_hookimpls()):
        try:
            specs = [_check(spec) for spec in cast("Iterable[object]", impl.function() or [])]
        except Exception as e:  # a third-party plugin's bug must not take the CLI down
            failures.append(PluginFailure(impl.plugin_name, describe_error(e)))
            continue
        for spec in specs:
            if spec.name in owner:
                failures.append(
                    PluginFailure(
                        impl.plugin_name,
                        f"command {spec.name!r} is already provided by "
                        f"{'the core' if owner[spec.name] == 'q25deploy' else repr(owner[spec.name])}",
                    )
                )
                continue
            owner[spec.name] = impl.plugin_name
            out.append((impl.plugin_name, spec))
    return out


def _check(spec: object) -> CommandSpec:
    if not isinstance(spec, CommandSpec):
        raise TypeError(f"q25deploy_cli_commands returned {spec!r}, not a CommandSpec")
    if not isinstance(spec.name, str) or not COMMAND_NAME.match(spec.name):
        raise ValueError(f"command name {spec.name!r} is not lowercase letters, digits and '-'")
    if not callable(spec.add_arguments) or not callable(spec.run):
        raise TypeError(f"command {spec.name!r}: add_arguments and run must be callables")
    return spec
