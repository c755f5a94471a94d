"""The q25deploy plugin hooks (pluggy project ``q25deploy``).

A board plugin is a module (or object) with functions marked ``@hookimpl`` whose names are
the hooks below. Plugins are found through the ``q25deploy`` entry-point group — the
built-in ``kv260``, ``zcu104`` and ``qemu`` plugins exactly like third-party ones. Core
defaults (``q25deploy.plugin.defaults``) are registered with ``trylast=True``, so a plugin's
answer overrides them. See docs/plugins.md.

Routing: a *board* hook (one with a ``target`` argument) is called on the plugin that
registered that target and on the core defaults only (``routing.board_hooks``), so a plugin
answers for its own boards without checking ``target``; a *broadcast* hook is called on every
plugin, one at a time. Semantics: hooks marked *firstresult* stop at the first non-``None``
result (the plugin, then the core default); *collect* hooks return the list of the non-``None``
results. A plugin's implementation that raises is reported by name (``routing``,
``manager``, ``commands``): it fails only its own board or its own commands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse

    from ..board.boardfile import Board
    from ..board.plan import MemoryPlan, Partition, Region, TensorLike

PROJECT = "q25deploy"
ENTRY_POINT_GROUP = "q25deploy"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True)
class TargetSpec:
    """A target a plugin provides: its name and its board file."""

    name: str
    board_file: Path
    description: str = ""


@dataclass(frozen=True)
class ImageLayout:
    """How the tokenizer runtime image lands on the board."""

    alignment: int  # section alignment of the Q25TOKRT image (power of two)
    install_dir: str  # absolute directory on the board, e.g. /lib/firmware/q25: the layer installs
    # the model there and deploy puts its releases there (the one source of that path)
    filename: str = "tokenizer.q25tokrt"
    runtime: str = "/usr/bin/q25tok"  # where the board's image has q25tok (smoke tests run it)


@dataclass(frozen=True)
class CommandSpec:
    """A command a plugin adds to the ``q25deploy`` command line (``q25deploy NAME ...``).

    ``add_arguments(parser)`` adds the command's options, or sub-commands of its own
    (``parser.add_subparsers``); it must not set the default ``func``. ``run(args, context)``
    does the work and returns the exit code (``None`` is 0); it raises
    :class:`q25deploy.errors.Q25Error` subclasses for what the user can fix (the CLI turns
    them into one line and their exit code) and reaches the plugin manager and targets through
    the :class:`~q25deploy.plugin.commands.CommandContext`. Keep the module that holds the spec
    light: it is imported to build the parser.
    """

    name: str  # the command word: lowercase letters, digits and '-', not a core command's
    help: str  # one line in ``q25deploy --help``
    description: str  # the first paragraph of ``q25deploy NAME --help``
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Any], int | None]  # context: a plugin.commands.CommandContext
    epilog: str = ""  # the text under ``q25deploy NAME --help`` (exit codes, examples)


@hookspec
def q25deploy_register_targets() -> Sequence[TargetSpec] | None:
    """*collect*, *broadcast*: the targets this plugin provides.

    Each plugin returns a list of :class:`TargetSpec`. A target name provided twice is
    reported as a failure of the second plugin; the first keeps it.
    """


@hookspec(firstresult=True)
def q25deploy_image_layout(target: str, board: Board) -> ImageLayout | None:
    """*firstresult*, *board*: the runtime image's alignment, install directory and file name.

    The install directory is where the layer's recipe installs the model and where deploy
    keeps its releases. Default: the board file's ``layout.image_alignment`` and
    ``install.path``.
    """


@hookspec(firstresult=True)
def q25deploy_partition_plan(target: str, board: Board, tensors: Sequence[TensorLike]) -> list[Partition] | None:
    """*firstresult*, *board*: pack the model's tensors into partitions (one per reserved region).

    Default: :func:`q25deploy.board.plan.plan_partitions` (file order, tensor alignment,
    never split, ``region_max_size``, headroom).
    """


@hookspec(firstresult=True)
def q25deploy_reserved_regions(target: str, board: Board, partitions: Sequence[Partition]) -> Sequence[Region] | None:
    """*firstresult*, *board*: the physical region of every partition.

    Default: :func:`q25deploy.board.plan.place_regions` (top-down in free DDR, 2 MiB
    aligned, within ``max_model_share``). Raise :class:`q25deploy.board.plan.FitError`
    when the model does not fit.
    """


@hookspec(firstresult=True)
def q25deploy_reserved_memory_dtsi(target: str, board: Board, plan: MemoryPlan) -> str | None:
    """*firstresult*, *board*: the text of ``reserved-memory.dtsi`` for the plan.

    Default: :func:`q25deploy.board.dtsi.reserved_memory_dtsi`.
    """


@hookspec
def q25deploy_layer_files(target: str, board: Board, build: Mapping[str, Any]) -> Mapping[str, bytes] | None:
    """*collect*, *board*: extra or replacement files for the BitBake layer, path → content.

    Used by the layer emitter (machine-specific parts belong to the board plugin); the
    plugin's file replaces the core's (:func:`q25deploy.packer.stages.core_layer_files`) at the
    same path, ``None`` removes it.
    """


@hookspec
def q25deploy_smoke_checks(target: str, board: Board) -> Sequence[tuple[str, str]] | None:
    """*collect*, *board*: extra smoke-test commands ``(name, shell command)`` run on the board
    after the built-in checks; a non-zero exit fails the smoke test."""


@hookspec
def q25deploy_cli_commands() -> Sequence[CommandSpec] | None:
    """*collect*, *broadcast*: the commands this plugin adds to the command line.

    Each plugin returns a list of :class:`CommandSpec`. A plugin whose hook raises, returns
    something else, names a command the core or an earlier plugin already has, or whose
    ``add_arguments`` raises is reported by name and its command left out; the other commands
    keep working. Called only when the command line needs plugin commands (``q25deploy
    --help``, or a command word the core does not have).
    """
