"""SWUpdate images (``.swu``): cpio newc with ``sw-description`` first, then
``sw-description.sig`` when signed, then the post-install script and the payload files.

``sw-description`` (libconfig) has the ``version`` (``1.0.0+<release id>`` unless given) and,
in a section named after the board (SWUpdate's board-specific settings: the board name of
``/etc/hwrevision``, which the layer writes as the board file's ``name``), the board's
``hardware-compatibility``, one ``files`` entry per payload file, each with its ``sha256``,
written into one directory under the install dir (``.q25-ota-incoming``), and the board script
``q25-ota.sh`` as a ``shellscript``. An update server (hawkBit, goosebit) reads the same
version and the (board, revision) pairs to match the image to the boards that report them. SWUpdate runs it with ``preinst`` before the files are written (it makes the
drop directory afresh, refusing a planted link) and with ``postinst`` after: it stages
``releases/<id>``, verifies every sha256, switches ``current`` and records the state as
``q25deploy deploy`` does, smoke-tests with ``q25tok`` and rolls back when that fails.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable
from typing import BinaryIO

from ..board.ota_settings import check_name
from ..resources import ota_script
from .archive import Entry, write_cpio
from .plan import OtaPlan, PackageError

SCRIPT_NAME = "q25-ota.sh"
DROP_DIR = ".q25-ota-incoming"


def lc_string(value: str) -> str:
    """A libconfig string literal."""
    if any(ord(c) < 0x20 for c in value):
        raise PackageError(f"control character in a sw-description value {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def drop_dir(plan: OtaPlan) -> str:
    return f"{plan.install_dir}/{DROP_DIR}"


def swu_script(plan: OtaPlan) -> bytes:
    """The board script with the directory SWUpdate writes the payload into and the board's
    q25tok (its preinst runs before the payload, and so the plan, exists)."""
    text = ota_script().decode()
    for marker, value in (("Q25_SWU_DIR=''", drop_dir(plan)), ("Q25_SWU_TOK=''", plan.q25tok)):
        if marker not in text:
            raise PackageError(f"the board script has no {marker.split('=')[0]} line (broken installation)")
        text = text.replace(marker, f"{marker.split('=')[0]}={shlex.quote(value)}", 1)
    return text.encode()


# libconfig setting names; a board section must not take the name of one of SWUpdate's own
_LC_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_SWUPDATE_KEYS = {"version", "description", "files", "images", "scripts", "bootenv", "hardware-compatibility"}


def default_version(plan: OtaPlan) -> str:
    return "1.0.0+" + plan.build_release


def board_section(name: str) -> str:
    """The board's section name in sw-description (its /etc/hwrevision board name)."""
    if not _LC_NAME.fullmatch(name) or name in _SWUPDATE_KEYS:
        raise PackageError(
            f"board name {name!r} cannot name a sw-description section (a letter, then letters, digits, "
            "'_' or '-'): SWUpdate looks the board's settings up under its /etc/hwrevision name"
        )
    return name


def sw_description(
    plan: OtaPlan, board: str, hw_revisions: tuple[str, ...], script: bytes, version: str | None = None
) -> bytes:
    for rev in hw_revisions:
        check_name(rev, "SWUpdate hardware revision")
    version = check_name(version or default_version(plan), "SWUpdate version")
    files = []
    for f in plan.files:
        files.append(
            "\t\t\t{\n"
            f"\t\t\t\tfilename = {lc_string(f.name)};\n"
            f"\t\t\t\tpath = {lc_string(drop_dir(plan) + '/' + f.name)};\n"
            f"\t\t\t\tsha256 = {lc_string(f.sha256)};\n"
            '\t\t\t\tproperties: { create-destination = "true"; };\n'
            "\t\t\t}"
        )
    script_entry = (
        "\t\t\t{\n"
        f"\t\t\t\tfilename = {lc_string(SCRIPT_NAME)};\n"
        '\t\t\t\ttype = "shellscript";\n'
        f"\t\t\t\tsha256 = {lc_string(hashlib.sha256(script).hexdigest())};\n"
        "\t\t\t}"
    )
    text = (
        "software =\n{\n"
        f"\tversion = {lc_string(version)};\n"
        f"\tdescription = {lc_string(plan.artifact_name)};\n"
        "\tbootloader_transaction_marker = false;\n"
        "\treboot = false;\n"
        f"\t{board_section(board)} =\n\t{{\n"
        f"\t\thardware-compatibility: [ {', '.join(lc_string(r) for r in hw_revisions)} ];\n"
        "\t\tfiles: (\n" + ",\n".join(files) + "\n\t\t);\n"
        "\t\tscripts: (\n" + script_entry + "\n\t\t);\n"
        "\t};\n"
        "};\n"
    )
    return text.encode()


def write_swu(
    out: BinaryIO,
    plan: OtaPlan,
    board: str,
    hw_revisions: tuple[str, ...],
    sign: Callable[[bytes], bytes] | None = None,
    version: str | None = None,
) -> bytes:
    """Write the ``.swu`` onto ``out``; returns its sw-description."""
    script = swu_script(plan)
    desc = sw_description(plan, board, hw_revisions, script, version)
    entries = [Entry("sw-description", desc)]
    if sign is not None:
        entries.append(Entry("sw-description.sig", sign(desc)))
    entries.append(Entry(SCRIPT_NAME, script, mode=0o755))
    entries += [Entry(f.name, f.data, f.path) for f in plan.files]
    write_cpio(out, entries)
    return desc
