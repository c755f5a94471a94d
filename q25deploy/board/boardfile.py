"""Board files (``targets/*.toml``): read with tomllib/tomli and validated into a :class:`Board`.

Every error names the file and the key (``kv260.toml: memory.banks[1].size: ...``): unknown
keys, wrong types, bad numbers, misaligned sizes, overlapping banks, reservations outside
DDR. The schema is documented in docs/boards.md.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10
    import tomli as tomllib

from ..errors import BoardFileError


@dataclass(frozen=True)
class Span:
    """A named physical address range [base, base + size)."""

    name: str
    base: int
    size: int
    in_device_tree: bool = False

    @property
    def end(self) -> int:
        return self.base + self.size

    def overlaps(self, other: Span) -> bool:
        return self.base < other.end and other.base < self.end


@dataclass(frozen=True)
class Layout:
    region_alignment: int = 0x200000
    tensor_alignment: int = 4096
    region_max_size: int = 0x20000000
    region_headroom: int = 0
    max_model_share: float = 0.5
    image_alignment: int = 4096
    reserve: int = 0  # > 0: reserved regions of this total, whatever the model (board/plan.py)


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    arch: str
    cpu: str
    banks: tuple[Span, ...]
    reserved: tuple[Span, ...]
    layout: Layout
    install_path: str
    runtime_path: str = "/usr/bin/q25tok"  # where the board's image has q25tok (the layer: ${bindir})
    device_tree_path: str = "/proc/device-tree"  # the running kernel's device tree
    memory_device: str = "/dev/mem"  # physical memory, for loading the reserved regions
    ssh_user: str = "root"
    ssh_port: int = 22
    ssh_become: str = "none"  # how a login that is not root gains root: none, sudo or doas (BECOME_METHODS)
    dropbear_receive_window: int = 0  # bytes; > 0: the layer sets dropbear's -W (0: dropbear as built)
    yocto_machines: tuple[str, ...] = ()  # Yocto MACHINE names, the main one first
    qemu: dict = field(default_factory=dict)
    ota: dict = field(default_factory=dict)  # [ota]: engines for the layer, device type, hw revision
    source: str = ""  # the file it came from

    @property
    def yocto_machine(self) -> str:
        """The main Yocto MACHINE name ("" when the board file names none)."""
        return self.yocto_machines[0] if self.yocto_machines else ""

    @property
    def ddr_bytes(self) -> int:
        return sum(b.size for b in self.banks)

    @property
    def model_budget(self) -> int:
        """Bytes of reserved regions the model may take (the board's max_model_share)."""
        return int(self.ddr_bytes * self.layout.max_model_share)


# -- schema ------------------------------------------------------------------------------
_INT, _STR, _BOOL, _FLOAT = "integer", "string", "boolean", "number"
_STRS = "string or array of strings"
SCHEMA: dict[str, Any] = {
    "board": {
        "name": _STR,
        "description": _STR,
        "arch": _STR,
        "cpu": _STR,
        "yocto_machine": _STRS,
        "device_tree": _STR,
        "memory_device": _STR,
    },
    "memory": {
        "banks": [{"name": _STR, "base": _INT, "size": _INT}],
        "reserved": [{"name": _STR, "base": _INT, "size": _INT, "in_device_tree": _BOOL}],
    },
    "layout": {
        "region_alignment": _INT,
        "tensor_alignment": _INT,
        "region_max_size": _INT,
        "region_headroom": _INT,
        "max_model_share": _FLOAT,
        "image_alignment": _INT,
        "reserve": _INT,
    },
    "install": {"path": _STR, "runtime": _STR},
    "ssh": {"user": _STR, "port": _INT, "become": _STR, "dropbear_receive_window": _INT},
    "qemu": {"machine": _STR, "cpu": _STR, "memory": _STR, "smp": _INT},
    "ota": {"mender": _BOOL, "swupdate": _BOOL, "mender_device_type": _STR, "swupdate_hw_revision": _STR},
}
DROPBEAR_MAX_WINDOW = 10 * 1024 * 1024  # dropbear's MAX_RECV_WINDOW (2022.83 to 2025.88)
REQUIRED = ("board.name", "board.arch", "memory.banks", "install.path")
_MACHINE = re.compile(r"[a-z0-9][a-z0-9_-]*")
#: ``[ssh] become``: none (the login is root), or ``sudo -n`` / ``doas -n`` before every remote command
BECOME_METHODS = ("none", "sudo", "doas")


def _check(value: Any, schema: Any, where: str, fail) -> None:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            fail(where, f"must be a table, got {type(value).__name__}")
        for k, v in value.items():
            if k not in schema:
                fail(f"{where}.{k}" if where else k, f"unknown key (known: {', '.join(schema)})")
            _check(v, schema[k], f"{where}.{k}" if where else k, fail)
    elif isinstance(schema, list):
        if not isinstance(value, list):
            fail(where, "must be an array of tables ([[...]])")
        for i, item in enumerate(value):
            _check(item, schema[0], f"{where}[{i}]", fail)
    else:
        ok = {
            _INT: isinstance(value, int) and not isinstance(value, bool),
            _STR: isinstance(value, str),
            _BOOL: isinstance(value, bool),
            _FLOAT: isinstance(value, (int, float)) and not isinstance(value, bool),
            _STRS: isinstance(value, str) or isinstance(value, list) and all(isinstance(v, str) for v in value),
        }[schema]
        if not ok:
            fail(where, f"must be a {schema}, got {value!r}")


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def load_board(path: str | Path) -> Board:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise BoardFileError(f"{path}: no such board file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BoardFileError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise BoardFileError(f"{path}: not valid TOML: {e}") from None
    return board_from_dict(raw, str(path))


# names and paths land in generated code (recipes, dts, C, shell): only safe characters
_BOARD_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_SPAN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,@+-]{0,62}")
_BOARD_PATH = re.compile(r"/[A-Za-z0-9._+/-]*")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def _layout(raw: dict, fail) -> Layout:
    lay = Layout(**raw.get("layout", {}))
    for k in ("region_alignment", "tensor_alignment", "image_alignment"):
        if not _pow2(getattr(lay, k)):
            fail(f"layout.{k}", f"must be a power of two, got {getattr(lay, k):#x}")
    if lay.image_alignment < 64:
        fail("layout.image_alignment", "must be at least 64")
    if lay.tensor_alignment > lay.region_alignment:
        fail("layout.tensor_alignment", "must not exceed layout.region_alignment")
    if lay.region_max_size <= 0 or lay.region_max_size % lay.region_alignment:
        fail("layout.region_max_size", f"must be a positive multiple of region_alignment {lay.region_alignment:#x}")
    if lay.region_headroom < 0:
        fail("layout.region_headroom", "must not be negative")
    if not 0 < lay.max_model_share <= 1:
        fail("layout.max_model_share", f"must be in (0, 1], got {lay.max_model_share}")
    if lay.reserve < 0:
        fail("layout.reserve", "must not be negative (0: regions sized to each model)")
    return lay


def _span(entry: dict, where: str, fail) -> Span:
    for k in ("name", "base", "size"):
        if k not in entry:
            fail(f"{where}.{k}", "is required")
    if not _SPAN_NAME.fullmatch(entry["name"]):
        fail(f"{where}.name", f"{entry['name']!r}: use letters, digits and _ . , @ + - (at most 63)")
    return Span(entry["name"], entry["base"], entry["size"], entry.get("in_device_tree", False))


def _banks(mem: dict, lay: Layout, fail) -> list[Span]:
    banks = []
    for i, bank in enumerate(mem["banks"]):
        where = f"memory.banks[{i}]"
        span = _span(bank, where, fail)
        if span.base < 0 or span.size <= 0 or span.end > 1 << 48:
            fail(where, "base/size out of range (size > 0, inside a 48-bit physical address space)")
        if span.base % lay.region_alignment or span.size % lay.region_alignment:
            fail(where, f"base and size must be multiples of region_alignment {lay.region_alignment:#x}")
        banks.append(span)
    if not banks:
        fail("memory.banks", "needs at least one bank")
    for i, a in enumerate(banks):
        for b2 in banks[i + 1 :]:
            if a.overlaps(b2):
                fail("memory.banks", f"banks {a.name!r} and {b2.name!r} overlap")
    return banks


def _reserved(mem: dict, banks: list[Span], fail) -> list[Span]:
    reserved = []
    for i, r in enumerate(mem.get("reserved", [])):
        where = f"memory.reserved[{i}]"
        span = _span(r, where, fail)
        if span.size <= 0 or span.base < 0:
            fail(where, "size must be positive and base not negative")
        if not any(bk.base <= span.base and span.end <= bk.end for bk in banks):
            fail(where, f"{span.name!r} [{span.base:#x}, {span.end:#x}) is not inside one memory bank")
        reserved.append(span)
    return reserved


def _check_text(raw: dict, fail) -> None:
    """What reaches generated code or a terminal: names, paths, the user, the description."""
    b, install, ssh = raw["board"], raw["install"], raw.get("ssh", {})
    if not _BOARD_NAME.fullmatch(b["name"]):
        fail("board.name", f"{b['name']!r}: use lower-case letters, digits, '-' and '_' (at most 63)")
    if "description" in b and not (b["description"].isprintable() and len(b["description"]) <= 200):
        fail("board.description", "must be one line of printable text (at most 200 characters)")
    paths = {
        "install.path": install["path"],
        "install.runtime": install.get("runtime", "/usr/bin/q25tok"),
        "board.device_tree": b.get("device_tree", "/proc/device-tree"),
        "board.memory_device": b.get("memory_device", "/dev/mem"),
    }
    for key, value in paths.items():
        if not _BOARD_PATH.fullmatch(value) or ".." in value.split("/"):
            fail(key, f"must be an absolute path of letters, digits and . _ + - / without '..', got {value!r}")
    if not 0 < ssh.get("port", 22) < 65536:
        fail("ssh.port", "must be 1..65535")
    if not _USER.fullmatch(ssh.get("user", "root")):
        fail("ssh.user", f"{ssh['user']!r} is not a user name")
    if ssh.get("become", "none") not in BECOME_METHODS:
        fail("ssh.become", f"{ssh['become']!r}: use one of {', '.join(BECOME_METHODS)}")


def _machines(b: dict, fail) -> tuple[str, ...]:
    """board.yocto_machine: one MACHINE name or several, each a BitBake override (lower case, no ':')."""
    machines = b.get("yocto_machine", [])
    machines = [machines] if isinstance(machines, str) else machines
    for m in machines:
        if not _MACHINE.fullmatch(m):
            fail("board.yocto_machine", f"{m!r} is not a MACHINE name (lower-case letters, digits, '-', '_')")
    if len(set(machines)) != len(machines):
        fail("board.yocto_machine", "names a MACHINE twice")
    return tuple(machines)


def _receive_window(ssh: dict, fail) -> int:
    window = ssh.get("dropbear_receive_window", 0)
    if not 0 <= window <= DROPBEAR_MAX_WINDOW:
        fail(
            "ssh.dropbear_receive_window",
            f"must be 0 (dropbear as built) or up to {DROPBEAR_MAX_WINDOW} (dropbear's maximum), got {window}",
        )
    return window


def board_from_dict(raw: dict, source: str) -> Board:
    def fail(where: str, msg: str):
        raise BoardFileError(f"{source}: {where}: {msg}")

    _check(raw, SCHEMA, "", fail)
    for key in REQUIRED:
        sect, name = key.split(".")
        if name not in raw.get(sect, {}):
            fail(key, "is required")
    _check_text(raw, fail)
    b, mem, ssh, install = raw["board"], raw["memory"], raw.get("ssh", {}), raw["install"]
    lay = _layout(raw, fail)
    banks = _banks(mem, lay, fail)
    return Board(
        name=b["name"],
        description=b.get("description", b["name"]),
        arch=b["arch"],
        cpu=b.get("cpu", ""),
        banks=tuple(banks),
        reserved=tuple(_reserved(mem, banks, fail)),
        layout=lay,
        install_path=install["path"].rstrip("/") or "/",
        runtime_path=install.get("runtime", "/usr/bin/q25tok"),
        device_tree_path=b.get("device_tree", "/proc/device-tree"),
        memory_device=b.get("memory_device", "/dev/mem"),
        ssh_user=ssh.get("user", "root"),
        ssh_port=ssh.get("port", 22),
        ssh_become=ssh.get("become", "none"),
        dropbear_receive_window=_receive_window(ssh, fail),
        yocto_machines=_machines(b, fail),
        qemu=dict(raw.get("qemu", {})),
        ota=dict(raw.get("ota", {})),
        source=source,
    )
