"""The unchanged rebuild's check, made before the plugins, numpy or gguf are loaded: rsync's
quick check (size and time) over everything the last build's inputs were read from.

The stamp's full check (:func:`q25deploy.packer.pipeline.build`) loads the plugins to resolve
the target, its board file and the plugins' versions. What it read is recorded in the stamp's
``quick`` record (:func:`record`): the request (target, board file, model, licence and layer
options, tool version, ``sys.path``), the board file that request resolved to (with its
sha256: a small file, read again each time), the model and licence file and each plugin's
module (path, size, mtime), and every ``sys.path`` folder's mtime (a plugin installed or
removed changes its folder). When none of that changed (:func:`unchanged`), the full check
would find the same inputs: the build is up to date without loading anything. Anything
different or unreadable only means the full check runs.

Light on purpose: the standard library and the model reference's resolution only.
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from .. import __version__


def request(asked: dict, model_path: os.PathLike[str] | str) -> dict:
    """What the user asked for (``asked``: build's arguments but the output folder), with paths
    made absolute (the working folder may differ) and the model's file as it resolved."""
    absolute = {
        k: os.path.abspath(v) if k in ("target_file", "model_license_file") and v else v for k, v in asked.items()
    }
    return {"tool": __version__, **absolute, "model_file": os.path.abspath(model_path), "sys_path": list(sys.path)}


def _stat(path: str) -> list:
    try:
        st = os.stat(path)
        return [path, st.st_size, st.st_mtime_ns, st.st_ino]
    except OSError:
        return [path]


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _snapshot(req: dict, board_file: str, watch: list[str]) -> dict:
    return {
        "request": req,
        "board": [board_file, _sha(board_file)],
        "files": [_stat(p) for p in watch],
        "dirs": [_stat(p) for p in req["sys_path"] if p and os.path.isdir(p)],
    }


def record(req: dict, board_file: str, plugin_files: list[str], failures: list[list[str]]) -> dict:
    """The stamp's ``quick`` record of a build (or full check) just made from ``req``."""
    lic = req.get("model_license_file")
    watch = [req["model_file"], *([lic] if lic else []), *sorted(set(plugin_files))]
    return {"watch": watch, "snapshot": _snapshot(req, board_file, watch), "failures": failures}


def unchanged(stamp: dict | None, req: dict) -> list[list[str]] | None:
    """The plugin failures to report again when nothing the last build read has changed, else None."""
    quick: Any = (stamp or {}).get("quick")
    try:
        board, watch = quick["snapshot"]["board"][0], quick["watch"]
        if not (isinstance(board, str) and isinstance(watch, list) and all(isinstance(p, str) for p in watch)):
            return None
        if _snapshot(req, board, watch) != quick["snapshot"]:
            return None
        failures = quick["failures"]
        return failures if isinstance(failures, list) else None
    except (KeyError, TypeError, IndexError):
        return None
