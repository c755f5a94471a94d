"""The state directory of ``q25deploy qemu up``: ``state.json`` records the QEMU it started
(pid, port, argv) and every file it wrote there, so that ``status`` finds it and ``down``
stops that process only and removes those files only."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from q25deploy.errors import SchemaError, UsageError

from .vm import QemuBoard

STATE_FILE = "state.json"
VERSION = 1


def state_home() -> Path:
    """Where the emulated boards keep their state: ``$XDG_STATE_HOME`` (when absolute, as the
    XDG base directory spec says), else ``~/.local/state``; then ``q25deploy/qemu``."""
    base = os.environ.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "q25deploy" / "qemu"


def state_dir(a: argparse.Namespace) -> Path:
    """The command's state directory: ``--state-dir``, else one per board name under
    :func:`state_home` (outside any working tree)."""
    if a.state_dir is not None:
        return a.state_dir
    name = a.target
    if not name or "/" in name or name in (".", "..") or not name.isprintable():
        raise UsageError(f"--target {name!r}: not a board name")
    return state_home() / name


@dataclass(frozen=True)
class State:
    pid: int
    port: int
    user: str  # the board file's SSH user
    argv: list[str]
    files: list[str]  # plain names inside the state directory, state.json last
    made_dir: bool  # `up` created the directory (and `down` removes it when empty)

    def board(self, state_dir: Path) -> QemuBoard:
        return QemuBoard(Path(os.path.abspath(state_dir)), self.port, self.pid, list(self.argv), 0.0)


def write_state(state_dir: Path, state: State) -> Path:
    path = state_dir / STATE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"version": VERSION, **asdict(state)}, indent=1) + "\n")
    tmp.replace(path)
    return path


def read_state(state_dir: Path) -> State | None:
    """The recorded QEMU, or None when the directory holds no state file."""
    path = state_dir / STATE_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise SchemaError(f"{path}: not a q25deploy qemu state file ({e})") from None
    try:
        if raw.pop("version") != VERSION:
            raise ValueError("unknown version")
        state = State(**raw)
        ok = (
            isinstance(state.pid, int)
            and state.pid > 1
            and isinstance(state.port, int)
            and isinstance(state.user, str)
            and all(isinstance(a, str) for a in state.argv)
            and all(_plain(f) for f in state.files)
            and isinstance(state.made_dir, bool)
        )
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise SchemaError(f"{path}: not a q25deploy qemu state file ({e})") from None
    if not ok:
        raise SchemaError(f"{path}: not a q25deploy qemu state file (bad pid, port, argv or file names)")
    return state


def _plain(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def remove_files(state_dir: Path, state: State) -> list[str]:
    """Remove the files ``up`` wrote (and the directory when ``up`` made it and it is empty
    then); returns the names removed."""
    removed = []
    for name in state.files:
        path = state_dir / name
        if path.is_symlink() or path.exists():
            if path.is_dir() and not path.is_symlink():
                continue  # never ours: up writes files only
            path.unlink()
            removed.append(name)
    if state.made_dir:
        try:
            state_dir.rmdir()
        except OSError:
            pass  # something else lives there: leave it
    return removed
