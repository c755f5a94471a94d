"""The second power-cut model: a disk that loses its volatile write cache. QEMU's own
``blklogwrites`` block driver sits between the board's virtio disk and its image and records
every write and every flush the guest sends, in the format of Linux's ``dm-log-writes`` (a
super block, then per entry one header sector — sector, nr_sectors, flags, data_len, little
endian — followed by its nr_sectors of data). From the image as it was before and the log we
build crash states as CrashMonkey and fstests' ``dm-log-writes`` replay do: every write up to a
flush is on the disk, of the writes after it (up to the next flush, what the disk may still
have held in its cache) any subset is."""

from __future__ import annotations

import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0x6A736677736872
FLUSH, FUA, DISCARD, MARK = 1, 2, 4, 8
_SUPER = struct.Struct("<QQQI")
_ENTRY = struct.Struct("<QQQQ")


class LogError(ValueError):
    pass


@dataclass(frozen=True)
class Entry:
    sector: int
    flags: int
    data_offset: int  # where its data starts in the log file
    nbytes: int


def drive_option(image: Path, log: Path) -> str:
    """A ``-drive`` value for a raw image behind blklogwrites (a fresh, empty log)."""
    log.write_bytes(b"")
    return f"format=raw,file.driver=blklogwrites,file.file.filename={image},file.log.filename={log}"


def read_log(log: Path) -> tuple[int, list[Entry]]:
    """(sector size, the entries in order). The entry the power cut while QEMU wrote it, and any
    after the last complete one, end the log."""
    data = log.read_bytes()
    if len(data) < _SUPER.size:
        return 512, []
    magic, version, _n, sectorsize = _SUPER.unpack_from(data)
    if magic != MAGIC or version != 1 or sectorsize not in (512, 4096):
        raise LogError(f"{log}: not a dm-log-writes log (magic {magic:#x}, version {version})")
    entries, pos = [], sectorsize
    while pos + _ENTRY.size <= len(data):
        sector, nr, flags, data_len = _ENTRY.unpack_from(data, pos)
        if flags & ~(FLUSH | FUA | DISCARD | MARK) or data_len:
            raise LogError(f"{log}: entry at {pos:#x}: flags {flags:#x}, data_len {data_len}: not one QEMU writes")
        if not (sector or nr or flags):
            break  # never written (the log ends)
        end = pos + sectorsize * (1 + (0 if flags & DISCARD else nr))
        if end > len(data):
            break  # cut while it was written
        entries.append(Entry(sector, flags, pos + sectorsize, nr * sectorsize))
        pos = end
    return sectorsize, entries


def epochs(entries: list[Entry]) -> list[int]:
    """Indexes just after each flush (0 first): where a crash state's certain prefix may end."""
    return [0] + [i + 1 for i, e in enumerate(entries) if e.flags & FLUSH]


@dataclass(frozen=True)
class CrashState:
    seed: int
    prefix: int  # entries [0, prefix) are on the disk
    kept: tuple[int, ...]  # of the writes after it, up to the next flush, the ones that reached it
    dropped: int

    def describe(self) -> str:
        return f"after entry {self.prefix}: {len(self.kept)} later write(s) kept, {self.dropped} dropped"


def choose(seed: int, entries: list[Entry]) -> CrashState:
    """A flush boundary and a subset of the writes after it (the seed decides both)."""
    rng = random.Random(seed)
    bounds = epochs(entries)
    prefix = rng.choice(bounds)
    after = []
    for i in range(prefix, len(entries)):
        if entries[i].flags & FLUSH:
            break
        if entries[i].nbytes and not entries[i].flags & DISCARD:
            after.append(i)
    kept = tuple(i for i in after if rng.random() < 0.5)
    return CrashState(seed, prefix, kept, len(after) - len(kept))


def reported(entries: list[Entry], done_at: int) -> CrashState:
    """The disk when the power goes right after the operation reported success (``done_at``:
    the log's length then): what was flushed by then, nothing after."""
    prefix = max(b for b in epochs(entries) if b <= done_at)
    later = sum(1 for e in entries[prefix:done_at] if e.nbytes)
    return CrashState(-1, prefix, (), later)


def build(base: Path, log: Path, sectorsize: int, entries: list[Entry], state: CrashState, out: Path) -> Path:
    """``base`` with the prefix's writes and the kept ones applied, in log order, written to ``out``."""
    shutil.copyfile(base, out)
    with open(log, "rb") as src, open(out, "r+b") as dst:
        for i in [*range(state.prefix), *state.kept]:
            e = entries[i]
            if not e.nbytes or e.flags & DISCARD:
                continue
            src.seek(e.data_offset)
            dst.seek(e.sector * sectorsize)
            dst.write(src.read(e.nbytes))
    return out
