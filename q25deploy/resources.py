"""Where the data shipped beside the package lives: the layer templates and C runtime
sources (top-level ``recipes/``) and, later, board files (``targets/``).

In an installed package they are the ``q25deploy._recipes`` / ``q25deploy._targets``
package data (mapped by pyproject.toml); in a source checkout, the top-level folders.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .errors import Q25Error

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """``recipes`` or ``targets`` as a real directory."""
    try:
        module = importlib.import_module(f"q25deploy._{name}")
        for entry in getattr(module, "__path__", []):
            if Path(entry).is_dir():
                return Path(entry)
    except ModuleNotFoundError:
        pass
    path = _SOURCE_ROOT / name
    if not path.is_dir():
        raise Q25Error(f"q25deploy's {name!r} data folder is missing from this installation (reinstall q25deploy)")
    return path


# what an in-tree `make` of the runtime leaves beside its sources (never shipped or copied)
BUILD_PRODUCT_PATTERNS = ("*.o", "*.a", "q25tok")


def is_build_product(path: Path) -> bool:
    return any(path.match(pattern) for pattern in BUILD_PRODUCT_PATTERNS)


# the board-side OTA script that Mender's update module and SWUpdate's script handler run
# (package data of q25deploy.ota.scripts): the layer installs it, the artifacts carry it
OTA_SCRIPT = Path(__file__).resolve().parent / "ota" / "scripts" / "q25-ota.sh"


def ota_script() -> bytes:
    return OTA_SCRIPT.read_bytes()


def runtime_sources() -> Path:
    """The C runtime's sources, as the BitBake recipe's local files."""
    return data_dir("recipes") / "meta-q25" / "recipes-q25" / "q25-tokenizer-runtime" / "files"


def runtime_library_sources() -> list[Path]:
    """The library's C files (everything but the q25tok command), for tools that link it."""
    return sorted(p for p in runtime_sources().glob("q25tok_*.c") if p.name != "q25tok_cli.c")
