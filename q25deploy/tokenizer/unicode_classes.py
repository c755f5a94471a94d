"""The committed Unicode code point class table (see tools/gen_unicode_classes.py)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

# llama.cpp's unicode_cpt_flags bits, plus WHITESPACE folded into the same word
UNDEFINED, NUMBER, LETTER, SEPARATOR = 0x01, 0x02, 0x04, 0x08
ACCENT_MARK, PUNCTUATION, SYMBOL, CONTROL = 0x10, 0x20, 0x40, 0x80
WHITESPACE = 0x100
MAX_CODEPOINT = 0x10FFFF


@lru_cache(maxsize=1)
def load() -> tuple[str, tuple[tuple[int, int], ...]]:
    """Return (unicode version, ((first code point, flags), ...)) ascending from 0."""
    text = resources.files("q25deploy").joinpath("data/unicode_classes.txt").read_text("ascii")
    version = ""
    ranges = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("unicode "):
            version = line.split()[1]
            continue
        cp, fl = line.split()
        ranges.append((int(cp, 16), int(fl, 16)))
    return version, tuple(ranges)


def version_code(version: str) -> int:
    major, minor, update = (int(x) for x in version.split("."))
    return major << 16 | minor << 8 | update
