"""Board hooks routed to the target's plugin, each plugin's call isolated.

A *board* hook (every hook with a ``target`` argument) reaches only the plugin that registered
the target (``Target.plugin``) and the core defaults: a plugin never answers for another
plugin's board, so it needs no ``if target != NAME`` guard. The *broadcast* hooks
(:data:`BROADCAST`) are called on every plugin, one at a time, by the manager and
``commands``. An exception from a plugin's implementation is one :class:`PluginError` naming
the plugin, the hook and the error, and so is an answer of the wrong type (:data:`ANSWERS`:
it would fail later without the plugin's name); a :class:`~q25deploy.errors.Q25Error` it
raises (a ``FitError``, ...) passes unchanged, and so does anything the core defaults raise
(a bug of the core stays one)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import pluggy

from ..board.plan import Partition, Region
from ..errors import PluginError, Q25Error
from . import hookspecs
from .hookspecs import ImageLayout
from .manager import DEFAULTS, describe_error

if TYPE_CHECKING:
    from .manager import Target

#: hooks called on every plugin: a plugin lists its targets and its commands
BROADCAST = frozenset({"q25deploy_register_targets", "q25deploy_cli_commands"})
#: hooks called on the target's plugin and the core defaults only
BOARD_HOOKS = frozenset(
    name
    for name, spec in vars(hookspecs).items()
    if name.startswith("q25deploy_") and "target" in inspect.signature(spec).parameters
)


def _sequence_of(kind: type) -> Callable[[object], bool]:
    return lambda answer: isinstance(answer, (list, tuple)) and all(isinstance(x, kind) for x in answer)


#: a board hook's answer that is not None: (its check, what it must be); q25deploy_smoke_checks'
#: answers are checked one check at a time (deploy/ops/smoke.py)
ANSWERS: dict[str, tuple[Callable[[object], bool], str]] = {
    "q25deploy_image_layout": (lambda answer: isinstance(answer, ImageLayout), "an ImageLayout"),
    "q25deploy_partition_plan": (_sequence_of(Partition), "a list of Partitions"),
    "q25deploy_reserved_regions": (_sequence_of(Region), "a list of Regions"),
    "q25deploy_reserved_memory_dtsi": (lambda answer: isinstance(answer, str), "a str"),
    "q25deploy_layer_files": (lambda answer: isinstance(answer, Mapping), "a mapping of path to bytes"),
}


class BoardHooks:
    """The board hooks of one target, as attributes: ``board_hooks(pm, target).q25deploy_image_layout(board=b)``
    (``target=`` is filled in). Each is ``pm.subset_hook_caller`` without the other plugins; a
    *firstresult* hook gives the first non-``None`` answer, a *collect* hook the list of them."""

    def __init__(self, pm: pluggy.PluginManager, target: Target) -> None:
        self._pm, self.target = pm, target
        keep = {target.plugin, DEFAULTS}
        self._others = [plugin for name, plugin in pm.list_name_plugin() if name not in keep]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in BOARD_HOOKS:
            raise AttributeError(f"{name} is not a board hook (broadcast hooks: {', '.join(sorted(BROADCAST))})")
        call = partial(_call, self._pm.subset_hook_caller(name, remove_plugins=self._others), name, self.target.name)
        setattr(self, name, call)  # made once per target
        return call


def board_hooks(pm: pluggy.PluginManager, target: Target) -> BoardHooks:
    return BoardHooks(pm, target)


def _call(caller: pluggy.HookCaller, hook: str, target: str, **kwargs: Any) -> Any:
    kwargs["target"] = target
    firstresult = bool(caller.spec and caller.spec.opts.get("firstresult"))
    results = []
    for impl in reversed(caller.get_hookimpls()):  # pluggy's call order: tryfirst .. trylast
        args = [kwargs[name] for name in impl.argnames]
        if impl.plugin_name == DEFAULTS:
            res = impl.function(*args)
        else:
            res = _plugin_call(impl, hook, target, args)
        if res is not None:
            if firstresult:
                return res
            results.append(res)
    return None if firstresult else results


def _plugin_call(impl: Any, hook: str, target: str, args: list[Any]) -> Any:
    where = f"plugin {impl.plugin_name!r} failed in {hook} for target {target!r}"
    if impl.hookwrapper or impl.wrapper:
        raise PluginError(f"{where}: board hooks do not run hook wrappers")
    try:
        res = impl.function(*args)
    except Q25Error:
        raise
    except Exception as e:  # a plugin's bug: its board's one-line error, never a traceback
        raise PluginError(f"{where}: {describe_error(e)}") from e
    check, expected = ANSWERS.get(hook, (lambda answer: True, ""))
    if res is not None and not check(res):
        raise PluginError(f"{where}: it answered {_short(res)}, not {expected}")
    return res


def _short(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."
