"""The commands plugins add (hook ``q25deploy_cli_commands``, docs/plugins.md).

Each plugin command's arguments are added to a scratch parser first and copied into the real
one only when that worked, so a plugin that raises halfway leaves nothing behind: it is
reported by name (like a plugin that fails to load) and the rest of the command line works.
Loading plugins imports pluggy and every plugin: ``app`` asks for this only when the command
word is not a core command (or for ``q25deploy --help``)."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from typing import Any

from .common import report_failures


@dataclass(frozen=True)
class PluginCommand:
    """The handler (``args.func``) of a plugin command: runs the plugin's ``run`` with its
    :class:`~q25deploy.plugin.commands.CommandContext`. ``plugin`` names the plugin when its
    command fails with an unexpected exception (``app``)."""

    plugin: str
    spec: Any  # CommandSpec
    plugin_manager: Any
    failures: list

    def __call__(self, args: argparse.Namespace) -> int:
        from ..plugin.commands import CommandContext

        context = CommandContext(self.plugin, self.plugin_manager, self.failures, report_failures)
        code = self.spec.run(args, context)
        return 0 if code is None else int(code)


def add_plugin_commands(sub, prog: str) -> list:
    """Add every plugin's commands to the top-level sub-parsers ``sub`` (whose commands so far
    are the core's); report the plugins that failed on stderr and return them."""
    from ..plugin.commands import collect_commands
    from ..plugin.manager import PluginFailure, describe_error, make_plugin_manager

    pm, failures = make_plugin_manager()
    for plugin, spec in collect_commands(pm, failures, taken=list(sub.choices)):
        scratch = argparse.ArgumentParser(prog=f"{prog} {spec.name}", add_help=False)
        try:
            spec.add_arguments(scratch)
        except Exception as e:  # a third-party plugin's bug must not take the CLI down
            failures.append(PluginFailure(plugin, f"command {spec.name!r}: {describe_error(e)}"))
            continue
        parser = sub.add_parser(
            spec.name,
            parents=[scratch],
            help=spec.help,
            description=textwrap.fill(" ".join(spec.description.split()), 79),
            epilog=spec.epilog or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(func=PluginCommand(plugin, spec, pm, failures))
    report_failures(failures)
    return failures
