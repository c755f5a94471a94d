"""The emulated board's Debian arm64 packages: downloaded (``apt-get download``) and extracted
(``dpkg-deb -x``) into a cache, nothing installed into the host; the kernel in them."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

ARCH = "arm64"
KERNEL_META = "linux-image-cloud-arm64"  # resolves to linux-image-6.1.0-N-cloud-arm64
BASE_PACKAGES = ("busybox-static", "libc6", "libcrypt1", "zlib1g")
# sudo and doas for the users who are not root (users.py), with PAM and their libraries
USER_PACKAGES = (
    "sudo",
    "opendoas",
    "libpam0g",
    "libpam-modules",
    "libaudit1",
    "libcap-ng0",
    "libselinux1",
    "libpcre2-8-0",
)
FLAVOUR_PACKAGES = {
    "dropbear": ("dropbear-bin", "libtomcrypt1", "libtommath1", "libgmp10"),
    "openssh": (
        "openssh-server",
        "libwrap0",
        "libaudit1",
        "libcap-ng0",
        "libpam0g",
        "libsystemd0",
        "libcap2",
        "libgcrypt20",
        "libgpg-error0",
        "liblz4-1",
        "liblzma5",
        "libzstd1",
        "libselinux1",
        "libpcre2-8-0",
        "libgssapi-krb5-2",
        "libkrb5-3",
        "libk5crypto3",
        "libkrb5support0",
        "libkeyutils1",
        "libcom-err2",
        "libssl3",
        "libnsl2",
        "libtirpc3",
    ),
}
FLAVOURS = tuple(FLAVOUR_PACKAGES)


class BoardError(RuntimeError):
    """The board could not be assembled or booted (the message says what and why)."""


def default_cache_dir() -> Path:
    """``$Q25_BOARD_CACHE``, else ``$XDG_CACHE_HOME/q25deploy/emulated-board`` (~/.cache)."""
    env = os.environ.get("Q25_BOARD_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "q25deploy" / "emulated-board"


def run_tool(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise BoardError(f"{cmd[0]} not found (needed to {what})") from None
    if r.returncode != 0:
        raise BoardError(f"{what} failed: {' '.join(cmd[:4])}…: {(r.stderr or r.stdout).strip()[-400:]}")
    return r


# -- packages -----------------------------------------------------------------------------


def _resolve_kernel() -> str:
    out = run_tool(
        ["apt-cache", "depends", "--no-recommends", "--no-suggests", f"{KERNEL_META}:{ARCH}"],
        f"resolve {KERNEL_META} (dpkg --add-architecture {ARCH} && apt-get update)",
    ).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends:") and "linux-image-" in line:
            return line.split()[1].split(":")[0]
    raise BoardError(f"{KERNEL_META}:{ARCH} has no kernel dependency (is the {ARCH} architecture added?)")


def fetch_packages(cache: Path, flavours=FLAVOURS) -> Path:
    """Download (``apt-get download``) and extract (``dpkg-deb -x``) the arm64 packages of the
    board into ``cache``; returns the extracted root. A cache that holds them is used as is,
    without asking apt (the second run is offline). One process at a time fills the cache
    (``flock`` on ``cache/.lock``: the workers of a parallel test run share it)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fetch_packages(cache, flavours)


def _fetch_packages(cache: Path, flavours) -> Path:
    names = sorted({*BASE_PACKAGES, *USER_PACKAGES, *(p for f in flavours for p in FLAVOUR_PACKAGES[f])})
    key = hashlib.sha256(json.dumps(names).encode()).hexdigest()[:12]
    index = cache / f"packages-{key}.json"
    debs_dir = cache / "debs"
    if index.is_file():
        debs = json.loads(index.read_text())["debs"]
        root = cache / f"root-{hashlib.sha256(json.dumps(debs).encode()).hexdigest()[:12]}"
        if (root / ".complete").is_file():
            return root
    debs_dir.mkdir(exist_ok=True)
    wanted = [_resolve_kernel(), *names]
    before = set(os.listdir(debs_dir))
    run_tool(
        ["apt-get", "download", "-q", *[f"{n}:{ARCH}" for n in wanted]],
        f"download the board's {ARCH} packages (dpkg --add-architecture {ARCH} && apt-get update)",
        cwd=debs_dir,
    )
    debs = []
    for n in wanted:  # the newest file of each package (apt-get download names it name_version_arch.deb)
        cands = sorted(
            (p for p in os.listdir(debs_dir) if p.startswith(f"{n}_") and p.endswith(f"_{ARCH}.deb")),
            key=lambda p: (p not in before, os.path.getmtime(debs_dir / p)),
        )
        if not cands:
            raise BoardError(f"apt-get download gave no {n}")
        debs.append(cands[-1])
    root = cache / f"root-{hashlib.sha256(json.dumps(debs).encode()).hexdigest()[:12]}"
    if not (root / ".complete").is_file():
        tmp = root.with_name(root.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for d in debs:
            run_tool(["dpkg-deb", "-x", str(debs_dir / d), str(tmp)], f"extract {d}")
        (tmp / ".complete").write_text("\n".join(debs) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    index.write_text(json.dumps({"debs": debs}, indent=1))
    return root


def kernel_release(root: Path) -> str:
    rels = sorted(p.name for p in (root / "lib" / "modules").iterdir())
    if not rels:
        raise BoardError(f"{root}: no kernel modules")
    return rels[-1]


def kernel_image(root: Path) -> Path:
    return root / "boot" / f"vmlinuz-{kernel_release(root)}"
