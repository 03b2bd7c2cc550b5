"""How ``ring`` cuts a load: each file's data region, windows over it (the warm plan, one shared queue)
and one contiguous share per reader (the cold plan). Pure planning: no I/O, no device."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from workbench.formats.index import PAGE_SIZE, TensorInfo
from workbench.strategies.base import LoadContext


class Piece(NamedTuple):
    tensor: int  # index into the load's tensors / buffers
    dst: int  # offset inside the tensor's buffer
    start: int  # offset inside the window
    nbytes: int


class Window(NamedTuple):
    file: str  # the model file it reads: a window never crosses a file
    lo: int  # offsets in that file, [lo, hi)
    hi: int
    pieces: tuple[Piece, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pieces)


class Region(NamedTuple):
    """A stretch [lo, hi) of one file to read, the file's tensors in file order, and ``base``: the
    index of ``tensors[0]`` among the load's tensors (what a piece names)."""

    file: str
    tensors: Sequence[TensorInfo]
    lo: int
    hi: int
    base: int = 0


def model_regions(ctx: LoadContext) -> list[Region]:
    """Each file's data region, in model order (the order of ``ctx.tensors``, file by file)."""
    regions, base = [], 0
    for f, tensors in ctx.by_file():
        if tensors:
            regions.append(Region(f.path, tensors, *f.data_range, base))
        base += len(tensors)
    return regions


def plan_windows(region: Region, size: int) -> list[Window]:
    """Windows of ``size`` bytes over the region (``lo`` page-aligned down), each with the pieces of the
    tensors it holds; a tensor crossing a window edge is split there."""
    tensors, lo, hi = region.tensors, region.lo - region.lo % PAGE_SIZE, region.hi
    windows, first = [], 0
    for a in range(lo, hi, size):
        b = min(a + size, hi)
        while first < len(tensors) and tensors[first].offset + tensors[first].nbytes <= a:
            first += 1
        pieces, k = [], first
        while k < len(tensors) and tensors[k].offset < b:
            t = tensors[k]
            s, e = max(a, t.offset), min(b, t.offset + t.nbytes)
            if e > s:
                pieces.append(Piece(region.base + k, s - t.offset, s - a, e - s))
            k += 1
        if pieces:
            windows.append(Window(region.file, a, b, tuple(pieces)))
    return windows


def plan_shares(regions: Sequence[Region], readers: int, size: int) -> list[list[Window]]:
    """One contiguous share of the regions' bytes per reader — cut over all of them in model order, so
    a share may run from the end of one file into the next — each cut into ``size`` windows. Each file
    counts from its region's page-aligned start to the page after its end: cuts land on page boundaries."""
    spans = [(r, r.lo - r.lo % PAGE_SIZE, -(-r.hi // PAGE_SIZE) * PAGE_SIZE) for r in regions]
    total = sum(b - a for _, a, b in spans)
    share = -(-total // readers // PAGE_SIZE) * PAGE_SIZE or PAGE_SIZE
    shares: list[list[Window]] = [[]]
    room = share
    for r, a, b in spans:
        while a < b:
            take = min(room, b - a)
            shares[-1] += plan_windows(r._replace(lo=a, hi=min(a + take, r.hi)), size)
            a, room = a + take, room - take
            if not room:
                shares.append([])
                room = share
    return [s for s in shares if s]
