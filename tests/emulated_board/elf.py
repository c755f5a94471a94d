"""ELF64 little-endian reading for the emulated board: kernel modules' dependencies (from
``.modinfo``) and shared libraries' (``DT_NEEDED``, searched in ``DT_RUNPATH`` and the
usual library directories)."""

from __future__ import annotations

import struct
from pathlib import Path

from .packages import BoardError, kernel_release

# modules of the cloud kernel the board needs (their dependencies are found from .modinfo)
MODULES = ("virtio_mmio", "virtio_net", "virtio_blk", "virtio-rng")
LIB_DIRS = ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib", "usr/lib")


def _elf_sections(data: bytes) -> dict[str, bytes]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BoardError("not a little-endian ELF64 file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = data[strtab[4] : strtab[4] + strtab[5]]
    out = {}
    for name_off, typ, _flags, _addr, off, size in heads:
        name = names[name_off : names.index(b"\0", name_off)].decode()
        out[name] = data[off : off + size] if typ != 8 else b""  # SHT_NOBITS
    return out


def module_depends(ko: Path) -> list[str]:
    info = _elf_sections(ko.read_bytes()).get(".modinfo", b"")
    for item in info.split(b"\0"):
        if item.startswith(b"depends="):
            return [d for d in item[8:].decode().split(",") if d]
    return []


def modules_in_order(root: Path, wanted=MODULES) -> list[Path]:
    """The .ko files of ``wanted`` and everything they depend on, dependencies first."""
    base = root / "lib" / "modules" / kernel_release(root) / "kernel"
    by_name = {p.name[:-3].replace("-", "_"): p for p in base.rglob("*.ko")}
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        seen.add(name)
        if name not in by_name:
            raise BoardError(f"kernel module {name} not found under {base}")
        for dep in module_depends(by_name[name]):
            visit(dep)
        order.append(by_name[name])

    for m in wanted:
        visit(m)
    return order


def _dynamic(path: Path) -> tuple[list[str], list[str]]:
    """(DT_NEEDED names, DT_RUNPATH directories) of a shared object or executable."""
    data = path.read_bytes()
    secs = _elf_sections(data)
    dyn, dynstr = secs.get(".dynamic", b""), secs.get(".dynstr", b"")
    needed, runpath = [], []
    for i in range(0, len(dyn) - 15, 16):
        tag, val = struct.unpack_from("<qQ", dyn, i)
        if tag == 0:
            break
        text = dynstr[val : dynstr.index(b"\0", val)].decode() if tag in (1, 29) else ""
        if tag == 1:  # DT_NEEDED
            needed.append(text)
        elif tag == 29:  # DT_RUNPATH (sudo finds libsudo_util in /usr/libexec/sudo through it)
            runpath += [d.strip("/") for d in text.split(":") if d.startswith("/")]
    return needed, runpath


def library_closure(root: Path, binaries: list[str], also: tuple[str, ...] = ()) -> list[str]:
    """Paths (relative to root) of the shared libraries the binaries (and plugins) need, and of
    the libraries named ``also`` (sonames no binary of the image links), transitively."""
    found: dict[str, str] = {}
    todo: list[str | None] = [*binaries, None]  # None: the names of ``also``, found like any DT_NEEDED
    while todo:
        rel = todo.pop()
        needed, runpath = _dynamic(root / rel) if rel is not None else (list(also), [])
        for lib in needed:
            if lib in found:
                continue
            for d in (*runpath, *LIB_DIRS):
                if (root / d / lib).exists():
                    found[lib] = f"{d}/{lib}"
                    todo.append(found[lib])
                    break
            else:
                raise BoardError(f"{rel or 'the image'} needs {lib}, which none of the board's packages has")
    return sorted(found.values())
