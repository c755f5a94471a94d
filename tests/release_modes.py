"""One mode for a release's files, whatever installed it (``deploy``, the layer's recipe,
Mender, SWUpdate): files 0644 (a program that does not run as root reads the tokenizer
image), ``q25tok`` 0755, directories 0755."""

from __future__ import annotations

import stat
from pathlib import Path

FILE_MODE = 0o644
EXEC_MODE = 0o755
DIR_MODE = 0o755


def wrong_modes(release_dir: Path) -> dict[str, str]:
    """Every entry of ``release_dir`` (itself included) whose mode is not the release's:
    relative path -> its mode in octal (empty when all agree)."""
    out = {}
    for p in [release_dir, *sorted(release_dir.rglob("*"))]:
        st = p.lstat()
        want = DIR_MODE if stat.S_ISDIR(st.st_mode) else EXEC_MODE if p.name == "q25tok" else FILE_MODE
        if stat.S_IMODE(st.st_mode) != want or stat.S_ISLNK(st.st_mode):
            out[p.relative_to(release_dir).as_posix()] = oct(stat.S_IMODE(st.st_mode))
    return out
