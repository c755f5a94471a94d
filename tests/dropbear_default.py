"""OE-core's dropbear files (from the Yocto snapshots, tests/yocto.py) and what the layer's
dropbear bbappend makes of ``/etc/default/dropbear``: for the host-side layer tests and the
emulated board's test of OE-core's init script."""

from __future__ import annotations

import re
import shlex
import subprocess
import tarfile
from functools import cache
from pathlib import Path

from requirements import need
from yocto import snapshots

META = "openembedded-core/meta/"
FILES = {
    "init": "recipes-core/dropbear/dropbear/init",
    "dropbear.default": "recipes-core/dropbear/dropbear/dropbear.default",
    "dropbear@.service": "recipes-core/dropbear/dropbear/dropbear@.service",
    # the image's allow-root-login / allow-empty-password edits of /etc/default/dropbear
    "rootfs-postcommands": "classes-recipe/rootfs-postcommands.bbclass",
}
FUNCTION = "q25_dropbear_receive_window"


@cache
def oe_dropbear_files(series: str) -> dict[str, str]:
    """OE-core's init script, defaults file and systemd unit of dropbear, and the image class
    that edits the defaults file, for one series (keys of FILES)."""
    tarball = snapshots() / f"yocto-{series}.tar.xz"
    need(
        tarball.is_file(),
        f"Yocto snapshot {tarball}",
        "../shared/yocto beside the repository, or set Q25_YOCTO_SNAPSHOTS",
    )
    names = {META + path: key for key, path in FILES.items()}
    out = {}
    with tarfile.open(tarball, "r:xz") as tar:
        for member in tar:
            name = member.name.removeprefix("./")  # the langdale, whinlatter and wrynose tarballs say ./
            if name in names:
                out[names[name]] = tar.extractfile(member).read().decode()
    assert set(out) == set(FILES), f"{tarball}: {sorted(out)}"
    return out


def window_function(bbappend: str) -> str:
    """The bbappend's shell function, as BitBake runs it (it uses no BitBake variables)."""
    m = re.search(rf"^{FUNCTION}\(\) {{\n.*?^}}\n", bbappend, re.S | re.M)
    assert m, "the bbappend has no window function"
    assert "${" not in m.group(0)
    return m.group(0)


def apply_window(function: str, default_file: Path, window: int, shell: tuple[str, ...] = ("sh",)) -> None:
    """Run the bbappend's function on a copy of the defaults file, as do_install does
    (bbfatal, from BitBake's logging, fails the task)."""
    call = f"{FUNCTION} {shlex.quote(str(default_file))} {window}\n"
    script = 'bbfatal() { echo "$*" >&2; exit 1; }\n' + function + call
    subprocess.run([*shell, "-c", script], check=True, capture_output=True, text=True)


def sh_words(default_file: Path) -> list[str]:
    """The words the init script passes: it sources the file and expands $DROPBEAR_EXTRA_ARGS
    unquoted."""
    r = subprocess.run(
        ["sh", "-c", '. "$1"; for w in $DROPBEAR_EXTRA_ARGS; do echo "$w"; done', "sh", str(default_file)],
        check=True,
        capture_output=True,
        text=True,
    )
    return r.stdout.split("\n")[:-1]


def systemd_words(default_file: Path) -> list[str]:
    """The words systemd passes for ``$DROPBEAR_EXTRA_ARGS`` (unbraced: split at whitespace)
    from ``EnvironmentFile=``, for the plain form the bbappend writes: ``KEY="value"`` with
    no quote, backslash, ``$`` or backquote inside (systemd and sh agree on exactly those)."""
    value = None
    for line in default_file.read_text().splitlines():
        m = re.fullmatch(r'DROPBEAR_EXTRA_ARGS="([^"\\$`]*)"', line)
        if line.startswith("DROPBEAR_EXTRA_ARGS="):
            assert m, f"not a plain double-quoted value: {line!r}"
            value = m.group(1)  # a later assignment wins, as in sh
    return value.split() if value is not None else []
