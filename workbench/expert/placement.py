"""O_DIRECT in-place placement math for expert slices, and the boundary-page release rule.

Why this exists (second write-up in shared/seeds): O_DIRECT wants file offset, length and buffer
address block-aligned, but a GGUF's expert slices start ``offset % block`` bytes past a boundary
(1152 on the measured model). Reading the enclosing aligned window into a bounce buffer and shifting
the payload back costs a full extra copy. If the destination buffer is placed at an address carrying
the same remainder, the window maps onto the buffer in place — *provided* every expert inherits the
remainder, i.e. the per-expert stride is a multiple of the block. When it is not, placement must
decline and say so (INERT), never pretend.

The placement also makes the first and last page of every slice shared with the neighbouring
expert. Releasing only fully covered pages is then exact no longer: it leaks two pages per eviction
(the leak only long sessions showed). :func:`releasable_pages` is the corrected rule.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.formats.index import PAGE_SIZE, ExpertBlob
from workbench.records import Engaged

MIN_KERNEL_ALIGNMENT = 64  # below this the compute kernels' vector loads would be misaligned


@dataclass(frozen=True)
class BlobPlacement:
    """Whether one blob's buffer can be placed for copy-free O_DIRECT reads, and how."""

    layer: int
    name: str
    placed: bool
    remainder: int  # file offset % block: the buffer address must carry the same remainder
    reserve: int  # bytes to reserve so every expert's aligned window fits inside the buffer
    reason: str = ""


@dataclass(frozen=True)
class PlacementReport:
    """``odirect-zero-copy ON|PARTIAL|INERT — n/m layer buffers placed``."""

    placed: int
    total: int
    reasons: tuple[str, ...] = ()

    @property
    def fact(self) -> Engaged:
        """The report as the engaged fact a load records (one ON/PARTIAL/INERT rule everywhere)."""
        why = self.reasons[0] if self.reasons and self.placed < self.total else ""
        return Engaged("odirect-zero-copy", self.placed, self.total, "layer buffers placed", why)

    @property
    def state(self) -> str:
        return self.fact.state

    def __str__(self) -> str:
        why = f" ({self.reasons[0]})" if self.reasons and self.placed < self.total else ""
        return f"odirect-zero-copy {self.state} — {self.placed}/{self.total} layer buffers placed{why}"


def plan_blob(blob: ExpertBlob, block: int = PAGE_SIZE, min_align: int = MIN_KERNEL_ALIGNMENT) -> BlobPlacement:
    """Decide placement for one blob: all experts must share one remainder mod ``block``."""
    if block <= 0 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    first, end = blob.span
    remainder = first % block
    reserve = _round_up(remainder + (end - first), block) + block  # one block of overhang slack
    remainders = {off % block for off, _ in blob.slices}
    if len(remainders) != 1:
        spacing = f"stride {blob.stride} B is" if blob.stride else "expert spacing is uneven,"
        return BlobPlacement(blob.layer, blob.name, False, remainder, reserve,
                             f"{spacing} not a multiple of the {block} B block")
    if remainder % min_align:
        return BlobPlacement(blob.layer, blob.name, False, remainder, reserve,
                             f"remainder {remainder} B would under-align tensors (not a multiple of {min_align} B)")
    return BlobPlacement(blob.layer, blob.name, True, remainder, reserve)


def plan_placements(blobs: tuple[ExpertBlob, ...] | list[ExpertBlob], block: int = PAGE_SIZE,
                    min_align: int = MIN_KERNEL_ALIGNMENT) -> tuple[list[BlobPlacement], PlacementReport]:
    """Plan every blob and summarise as an ON/PARTIAL/INERT report."""
    plans = [plan_blob(b, block, min_align) for b in blobs]
    reasons = tuple(dict.fromkeys(p.reason for p in plans if not p.placed))
    return plans, PlacementReport(sum(p.placed for p in plans), len(plans), reasons)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def pages_touched(addr: int, nbytes: int, page: int = PAGE_SIZE) -> range:
    """Every page index that ``[addr, addr + nbytes)`` touches, partially or fully."""
    if nbytes <= 0:
        return range(0)
    return range(addr // page, (addr + nbytes - 1) // page + 1)


def pages_fully_covered(addr: int, nbytes: int, page: int = PAGE_SIZE) -> range:
    """Pages lying entirely inside ``[addr, addr + nbytes)`` — the old, leaky release rule."""
    first = _round_up(addr, page) // page
    last = (addr + nbytes) // page
    return range(first, max(first, last))


def releasable_pages(addr: int, nbytes: int, left_live: bool, right_live: bool,
                     page: int = PAGE_SIZE) -> range:
    """Pages an evicted entry may release: fully covered ones, plus a boundary page it shares
    with a neighbour once that neighbour is gone (never a page a live neighbour still uses)."""
    touched = pages_touched(addr, nbytes, page)
    if not touched:
        return touched
    start, stop = touched.start, touched.stop
    if addr % page and left_live:
        start += 1
    if (addr + nbytes) % page and right_live:
        stop -= 1
    return range(start, max(start, stop))
