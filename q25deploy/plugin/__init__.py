"""The plugin system boards are added through: the ``q25deploy_`` hook specifications, the
manager factory (entry points, failure isolation), the routing of board hooks to the target's
plugin and the core defaults.

Exports ``hookimpl``, ``TargetSpec``, ``ImageLayout`` and ``CommandSpec`` for plugin authors;
``manager.make_plugin_manager``; ``routing.board_hooks`` (every call of a board hook);
``commands.CommandContext`` (what a plugin command's ``run`` gets)."""

from .hookspecs import CommandSpec, ImageLayout, TargetSpec, hookimpl

__all__ = ["CommandSpec", "ImageLayout", "TargetSpec", "hookimpl"]
