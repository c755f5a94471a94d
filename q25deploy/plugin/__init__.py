"""The plugin system boards are added through: the ``q25deploy_`` hook specifications, the
manager factory (entry points, failure isolation) and the core defaults.

Exports ``hookimpl``, ``TargetSpec`` and ``ImageLayout`` for plugin authors; ``manager.make_plugin_manager``."""

from .hookspecs import ImageLayout, TargetSpec, hookimpl

__all__ = ["ImageLayout", "TargetSpec", "hookimpl"]
