"""Tests that need an external tool or package: skipped with a reason on a user's machine,
failed on CI (``CI`` set), where .ci/run installs everything."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil

import pytest


def _missing(what: str, how: str) -> None:
    message = f"{what} is not available ({how})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: CI must install it", pytrace=False)
    pytest.skip(message)


def unavailable(what: str, how: str) -> None:
    """Something a test needs is missing: skip with the reason, or fail on CI."""
    _missing(what, how)


def need_module(name: str, how: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        _missing(f"Python module {name}", how)


def need_module_file(name: str, how: str) -> None:
    """That ``name`` is installed, without importing it here (llama_cpp loads its native
    library at import: that belongs in the reference's child process)."""
    if importlib.util.find_spec(name) is None:
        _missing(f"Python module {name}", how)


def need_program(name: str, how: str) -> str:
    path = shutil.which(name)
    if path is None:
        _missing(f"program {name}", how)
    return path  # type: ignore[return-value]


def need(ok: bool, what: str, how: str) -> None:
    """Any other requirement (a locale, a data snapshot): skip or, on CI, fail."""
    if not ok:
        _missing(what, how)
