"""The memory plan: tensors → partitions → reserved-memory regions. Pure functions.

1. Tensors are taken in file order (deterministic, and it keeps a layer's tensors
   together) and packed into partitions: each tensor at the next multiple of the board's
   ``tensor_alignment``, a new partition when ``region_max_size`` would be exceeded; a
   tensor is never split (one larger than ``region_max_size`` gets a partition of its own).
2. Each partition's region is its used size plus ``region_headroom``, rounded up to
   ``region_alignment`` (2 MiB).
3. Regions are placed top-down in the DDR windows left free by the board's existing
   reservations, aligned to ``region_alignment``; the total must stay within the board's
   ``max_model_share`` of DDR.

A fixed reservation (``[layout] reserve``, ``build --reserve``) makes the regions the same for
every model: the reservation is cut into equal regions of at most ``region_max_size``
(:func:`reservation_sizes`), placed as above; partitions are packed up to that region size and
partition ``i`` goes into region ``i``. Regions no partition needs stay reserved (``spare``), so
one image's device tree holds every later model that fits; one that does not is a FitError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..common import format_size
from ..errors import FitError
from ..schema import NODE_PREFIX
from .boardfile import Board, Span
from .ours import why_not_ours


class TensorLike(Protocol):
    """What planning reads of a tensor (read-only: the model's TensorInfo is frozen)."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def ggml_type(self) -> int: ...
    @property
    def data_offset(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def type_name(self) -> str: ...


@dataclass(frozen=True)
class Placement:
    name: str
    type_name: str
    shape: tuple[int, ...]
    nbytes: int
    source_offset: int  # absolute offset in the GGUF
    region: int  # region index
    offset: int  # offset inside the region


@dataclass(frozen=True)
class Region:
    index: int
    base: int
    size: int  # reserved bytes (aligned, with headroom)
    used: int  # bytes of the partition file
    bank: str

    @property
    def label(self) -> str:
        return f"q25_region{self.index}"

    @property
    def node_name(self) -> str:
        return f"{NODE_PREFIX}{self.index}@{self.base:x}"

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class MemoryPlan:
    regions: tuple[Region, ...]
    tensors: tuple[Placement, ...]
    budget: int
    spare: tuple[Region, ...] = ()  # a fixed reservation's regions this model leaves empty

    @property
    def reserved_bytes(self) -> int:
        return sum(r.size for r in self.regions + self.spare)

    def address(self, p: Placement) -> int:
        return self.regions[p.region].base + p.offset


def align_up(n: int, a: int) -> int:
    return -(-n // a) * a


def align_down(n: int, a: int) -> int:
    return n // a * a


def pack(
    tensors: Sequence[TensorLike], tensor_alignment: int, region_max_size: int
) -> list[list[tuple[TensorLike, int]]]:
    """Tensors in file order → partitions of (tensor, offset)."""
    parts: list[list[tuple[TensorLike, int]]] = []
    cur: list[tuple[TensorLike, int]] = []
    used = 0
    for t in sorted(tensors, key=lambda t: t.data_offset):
        off = align_up(used, tensor_alignment)
        if cur and off + t.nbytes > region_max_size:
            parts.append(cur)
            cur, off = [], 0
        cur.append((t, off))
        used = off + t.nbytes
    if cur:
        parts.append(cur)
    return parts


def free_windows(board: Board) -> list[Span]:
    """DDR minus existing reservations, shrunk to region alignment, highest first."""
    a = board.layout.region_alignment
    windows = []
    for bank in board.banks:
        cuts = sorted((r.base, r.end) for r in board.reserved if r.overlaps(bank))
        start = bank.base
        for lo, hi in cuts + [(bank.end, bank.end)]:
            s, e = align_up(max(start, bank.base), a), align_down(min(lo, bank.end), a)
            if e > s:
                windows.append(Span(bank.name, s, e - s))
            start = max(start, hi)
    return sorted(windows, key=lambda w: -w.end)


@dataclass(frozen=True)
class Partition:
    """Tensors packed for one region: (tensor, offset) in file order, used and region size."""

    index: int
    items: tuple[tuple[TensorLike, int], ...]
    used: int
    size: int


def reservation_sizes(board: Board) -> list[int]:
    """A fixed reservation's regions: ``reserve`` rounded up to ``region_alignment`` and cut into
    the fewest equal regions of at most ``region_max_size``; [] without one."""
    lay = board.layout
    if lay.reserve <= 0:
        return []
    total = align_up(lay.reserve, lay.region_alignment)
    n = -(-total // lay.region_max_size)
    return [align_up(-(-total // n), lay.region_alignment)] * n


def plan_partitions(tensors: Sequence[TensorLike], board: Board) -> list[Partition]:
    """Steps 1 and 2: pack tensors, size each region (headroom, alignment; a fixed
    reservation's region size)."""
    lay = board.layout
    fixed = reservation_sizes(board)
    out = []
    for i, items in enumerate(pack(tensors, lay.tensor_alignment, fixed[0] if fixed else lay.region_max_size)):
        used = max((off + t.nbytes for t, off in items), default=0)
        size = fixed[0] if fixed else align_up(used + lay.region_headroom, lay.region_alignment)
        out.append(Partition(i, tuple(items), used, size))
    return out


def reservation_regions(board: Board) -> tuple[Region, ...]:
    """The fixed reservation's regions, placed like a model's (all empty); () without one."""
    sizes = reservation_sizes(board)
    return _place(board, [Partition(i, (), 0, size) for i, size in enumerate(sizes)]) if sizes else ()


def place_regions(board: Board, partitions: Sequence[Partition]) -> tuple[Region, ...]:
    """Step 3: a region per partition, top-down in the free DDR windows, within budget; with a
    fixed reservation, the reservation's first regions."""
    fixed = reservation_regions(board)
    if not fixed:
        return _place(board, partitions)
    used = sum(p.used for p in partitions)
    if len(partitions) > len(fixed) or any(p.used > r.size for p, r in zip(partitions, fixed)):
        raise FitError(
            f"the model does not fit {board.name}'s fixed reservation of {len(fixed)} region(s) of "
            f"{format_size(fixed[0].size)} ({format_size(sum(r.size for r in fixed))}, layout.reserve or --reserve): "
            f"its {used:,} bytes need {len(partitions)} region(s) of that size; reserve more"
        )
    return tuple(Region(p.index, r.base, r.size, p.used, r.bank) for p, r in zip(partitions, fixed))


def _place(board: Board, partitions: Sequence[Partition]) -> tuple[Region, ...]:
    lay = board.layout
    need = sum(p.size for p in partitions)
    if need > board.model_budget:
        raise FitError(
            f"the model does not fit {board.name}: it needs {need:,} bytes ({format_size(need)}) of reserved memory, "
            f"the board allows {board.model_budget:,} bytes ({format_size(board.model_budget)}, "
            f"{lay.max_model_share:.0%} of {format_size(board.ddr_bytes)} DDR)"
        )
    windows = [(w.name, [w.base, w.end]) for w in free_windows(board)]  # [base, end) shrinks from the top
    regions = []
    for p in partitions:
        best = next((w for w in windows if w[1][1] - w[1][0] >= p.size), None)  # highest window first
        if best is None:
            largest = max((w[1][1] - w[1][0] for w in windows), default=0)
            raise FitError(
                f"the model does not fit {board.name}: region {p.index} needs {p.size:,} bytes ({format_size(p.size)}) of "
                f"contiguous DDR, the largest free window left is {largest:,} bytes ({format_size(largest)})"
            )
        base = align_down(best[1][1] - p.size, lay.region_alignment)
        best[1][1] = base
        regions.append(Region(p.index, base, p.size, p.used, best[0]))
    return tuple(regions)


def check_placement(partitions: Sequence[Partition], tensors: Sequence[TensorLike], tensor_alignment: int) -> None:
    """A partition plan (from any plugin) is sound: every tensor of the model exactly once, at an
    aligned offset inside its partition, none overlapping another. The digests the build
    records for each partition are computed from the plan, so an unsound plan would give
    files whose bytes differ from their recorded sha256."""
    want = {t.name for t in tensors}
    seen: set[str] = set()
    for i, p in enumerate(partitions):
        if p.index != i:
            raise FitError(f"a plugin's partition plan is unsound: partition {i} says it is {p.index}")
        end = 0
        for t, off in sorted(p.items, key=lambda item: item[1]):
            if t.name in seen or t.name not in want:
                raise FitError(
                    f"a plugin's partition plan is unsound: tensor {t.name!r} placed twice or not in the model"
                )
            if off < end or off % tensor_alignment or off + t.nbytes > p.used:
                raise FitError(
                    f"a plugin's partition plan is unsound: tensor {t.name!r} at offset {off} of partition "
                    f"{i} overlaps, is not {tensor_alignment}-aligned, or ends past its {p.used} bytes"
                )
            seen.add(t.name)
            end = off + t.nbytes
    if seen != want:
        missing = sorted(want - seen)
        raise FitError(
            f"a plugin's partition plan is unsound: {len(missing)} tensor(s) not placed ({missing[0]!r}, ...)"
        )


def assemble(
    partitions: Sequence[Partition], regions: Sequence[Region], board: Board, tensors: Sequence[TensorLike]
) -> MemoryPlan:
    """The plan from partitions and their regions, checked: a sound placement, and every region
    matching its partition, inside one DDR bank, clear of the board's reservations and the others."""
    check_placement(partitions, tensors, board.layout.tensor_alignment)
    if len(partitions) != len(regions) or any(
        r.index != i or r.size < p.used or r.base % 4096 for i, (p, r) in enumerate(zip(partitions, regions))
    ):
        raise FitError("a plugin returned regions that do not match the partitions")
    for i, a in enumerate(regions):
        why = why_not_ours(board, {"node": a.node_name, "base": a.base, "size": a.size})
        if why:
            raise FitError(f"region {a.index} [{a.base:#x}, {a.end:#x}) is {why}")
        for b in regions[i + 1 :]:
            if a.base < b.end and b.base < a.end:
                raise FitError(f"regions {a.index} and {b.index} overlap")
    placements = tuple(
        Placement(t.name, t.type_name, tuple(t.shape), t.nbytes, t.data_offset, p.index, off)
        for p in partitions
        for t, off in p.items
    )
    fixed = reservation_regions(board)
    own = [(r.base, r.size) for r in regions] == [(r.base, r.size) for r in fixed[: len(regions)]]
    return MemoryPlan(tuple(regions), placements, board.model_budget, fixed[len(regions) :] if own else ())


def plan_memory(tensors: Sequence[TensorLike], board: Board) -> MemoryPlan:
    """The default plan (what the core hook implementations do)."""
    parts = plan_partitions(tensors, board)
    return assemble(parts, place_regions(board, parts), board, tensors)
