"""What a build is asked (:class:`Request`, the target and model resolved) and what it
returns (:class:`BuildResult`): the data :mod:`.pipeline` hands :mod:`.full_build` and the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model.source import ModelSource
    from ..plugin.manager import PluginFailure, Target

Progress = Callable[[str], None]


@dataclass
class BuildResult:
    out: Path
    up_to_date: bool
    summary: dict
    note: str
    failures: list[PluginFailure]
    payload: dict | None = None  # how the partitions were made (Payload.report); None when up to date


@dataclass(frozen=True)
class Request:
    """What the user asked for, resolved: the target, the model, the licence and layer options."""

    target: Target
    src: ModelSource
    out: Path
    license_id: str | None
    license_file: str | None
    layer_release: int = 0  # PV 1.<release>+q25.<hash> of the model-assets recipe
    layer_maintainer: str | None = None  # the layer README's maintainer
    forward_prompts: int | None = 1  # the smoke prompts the forward record covers (None: all)
