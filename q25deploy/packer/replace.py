"""Replacing an output directory safely: only what q25deploy wrote, never leaving it missing.

- :func:`check_replaceable`: DIR may be replaced only when it is absent, empty, or holds a
  previous q25deploy output of the same kind whose ``manifest.json`` lists every file in it
  (a file somebody else put there stops the command; nothing is deleted).
- :func:`exchange`: the new directory takes DIR's place by ``renameat2(RENAME_EXCHANGE)``
  where the kernel and file system have it, so DIR is never missing, not even for an
  instant; elsewhere by two renames (a moment without DIR, never a mix of old and new).
- :func:`remove_stale`: temporaries of killed runs (``.DIR.tmp-PID-*``, ``.DIR.old-PID-*``)
  whose process is gone are removed, so they never pile up or get in the way; only this
  user's (in a shared folder another user's, or a run's on another machine, is not ours).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from ..errors import OutputError, UsageError
from ..layout import MANIFEST, STAMP

MANIFEST_FORMAT = "q25deploy-manifest/1"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# what marks an output of each kind written before manifests named their kind (0.1.0)
_LEGACY_MARKERS = {
    "build": "build-info",
    "tokenizer": "tokenizer-runtime-image-manifest",
    "tensors": "tensor-payload-manifest",
    "runtime": "runtime-binary",
}


def output_kind(manifest: dict) -> str | None:
    """The kind of output a manifest describes (``build``, ``tokenizer``, ...), or None."""
    if manifest.get("format") != MANIFEST_FORMAT or not isinstance(manifest.get("artifacts"), list):
        return None
    if isinstance(manifest.get("output"), str):
        return manifest["output"]
    kinds = {a.get("kind") for a in manifest["artifacts"] if isinstance(a, dict)}
    for kind, marker in _LEGACY_MARKERS.items():  # build first: a build also holds tokenizer files
        if marker in kinds:
            return kind
    return None


def _listed(manifest: dict) -> set[str]:
    return {a["path"] for a in manifest["artifacts"] if isinstance(a, dict) and isinstance(a.get("path"), str)}


def _foreign_files(dest: Path, allowed: set[str]) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(dest):  # symlinks to folders are listed, not followed
        rel_dir = os.path.relpath(folder, dest)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel not in allowed:
                found.append(rel)
    return sorted(found)


def check_replaceable(dest: Path, kind: str) -> None:
    """Refuse (exit 2) to replace a directory that is not an earlier output of this kind."""
    if dest == Path.cwd() or dest in Path.cwd().parents:
        raise UsageError(
            f"{dest}: refusing to replace the directory you are in (or one above it); "
            "give --out a new or q25deploy-written directory"
        )
    if not dest.exists():
        return
    if not dest.is_dir():
        raise OutputError(f"{dest}: exists and is not a directory")
    if not any(dest.iterdir()):
        return
    try:
        manifest = json.loads((dest / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        manifest = None
    found = output_kind(manifest) if isinstance(manifest, dict) else None
    if found != kind:
        what = f"a q25deploy {found} output" if found else "files q25deploy did not write (no q25deploy manifest.json)"
        raise UsageError(
            f"{dest}: holds {what}; refusing to replace it with a {kind} output "
            "(choose another --out, or empty that directory yourself)"
        )
    foreign = _foreign_files(dest, _listed(manifest) | {MANIFEST, STAMP})
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise UsageError(
            f"{dest}: holds files q25deploy did not write ({', '.join(foreign[:3])}{more}); "
            "refusing to replace it (move them, or choose another --out)"
        )


def temp_dir(dest: Path) -> Path:
    """A new temporary sibling of ``dest`` named for this process (see :func:`remove_stale`)."""
    return Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-{os.getpid()}-", dir=dest.parent))


_STALE = re.compile(r"\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)(?:-.*)?\Z")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mine(entry: Path) -> bool:
    """A directory (not a link to one) this user owns."""
    try:
        st = os.lstat(entry)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def remove_stale(dest: Path) -> None:
    """Remove this user's temporaries of ``dest`` left by runs that were killed (their process
    is gone); never another user's: we remove only what we wrote."""
    try:
        entries = list(dest.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = _STALE.match(entry.name)
        if m and m["name"] == dest.name and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])) and _mine(entry):
            shutil.rmtree(entry, ignore_errors=True)


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the kernel, libc or file system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err))


def exchange(tmp: Path, dest: Path) -> None:
    """Put ``tmp`` in ``dest``'s place; the old ``dest`` (if any) is removed afterwards."""
    if not dest.exists():
        os.rename(tmp, dest)
        return
    if _renameat2_exchange(tmp, dest):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old output
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-{os.getpid()}-", dir=dest.parent))
    os.rename(dest, old / "d")
    try:
        os.rename(tmp, dest)
    except OSError:
        os.rename(old / "d", dest)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
