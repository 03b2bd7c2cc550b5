"""Where each expert slice of a blob lives inside the blob's reservation, per placement.

* ``inplace`` — the reservation mirrors the blob at the file's own remainder: expert ``e`` sits at
  ``remainder + (offset_e - blob.offset)`` (``plan_blob``'s remainder and reserve), so every expert's
  page-aligned O_DIRECT window maps onto its slot and neighbours share a boundary page (the second
  write-up's zero-copy placement). A blob ``plan_blob`` declines gets the ``bounce`` layout, and the
  :class:`~workbench.expert.placement.PlacementReport` says which and why.
* ``bounce`` — the per-layer buffer of the write-up's baseline: the blob mirrored from a page boundary
  (expert ``e`` at ``offset_e - blob.offset``); reads go through a bounce buffer and a shift copy.
  Page-multiple strides put every slot on a page boundary, so nothing is shared.
* ``aligned`` — every expert in its own page-aligned slot of whole pages: nothing is ever shared.

An entry *owns* ``extent`` bytes from its slot: the slice itself, or its whole pages under ``aligned``
(the tail of its last page belongs to nobody else), which is what the release rules count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from workbench.expert.placement import BlobPlacement, PlacementReport, plan_blob
from workbench.formats.index import PAGE_SIZE, ExpertBlob

PLACEMENTS = ("inplace", "bounce", "aligned")


@dataclass(frozen=True)
class BlobLayout:
    """One blob's reservation size and its experts' slots (offsets from the reservation's start)."""

    blob: ExpertBlob
    placement: str  # the layout used: "inplace", "bounce" or "aligned"
    reserve: int
    slots: tuple[int, ...]
    extents: tuple[int, ...]
    plan: BlobPlacement | None = None  # plan_blob's verdict when "inplace" was asked for

    def slice(self, expert: int) -> tuple[int, int]:
        """(file offset, nbytes) of ``expert``."""
        return self.blob.slices[expert]


def layout_blob(blob: ExpertBlob, placement: str, page: int = PAGE_SIZE) -> BlobLayout:
    """The layout of one blob under ``placement`` (``inplace`` falls back to ``bounce`` if declined)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    sizes = tuple(n for _, n in blob.slices)
    if placement == "aligned":
        extents = tuple(_round_up(max(n, 1), page) for n in sizes)
        slots = tuple(sum(extents[:e]) for e in range(len(extents)))
        return BlobLayout(blob, "aligned", max(page, sum(extents)), slots, extents)
    first, end = blob.span
    plan = plan_blob(blob, page) if placement == "inplace" else None
    if plan is not None and plan.placed:
        slots = tuple(plan.remainder + off - first for off, _ in blob.slices)
        return BlobLayout(blob, "inplace", plan.reserve, slots, sizes, plan)
    slots = tuple(off - first for off, _ in blob.slices)
    return BlobLayout(blob, "bounce", max(page, _round_up(end - first, page)), slots, sizes, plan)


def layout_blobs(blobs: Sequence[ExpertBlob], placement: str,
                 page: int = PAGE_SIZE) -> tuple[list[BlobLayout], PlacementReport]:
    """Every blob's layout, and the ``odirect-zero-copy ON|PARTIAL|INERT — n/m`` report for them."""
    layouts = [layout_blob(b, placement, page) for b in blobs]
    if placement != "inplace":
        return layouts, PlacementReport(0, len(layouts), (f"placement {placement} asked for",))
    reasons = tuple(dict.fromkeys(lay.plan.reason for lay in layouts if lay.plan and not lay.plan.placed))
    placed = sum(lay.placement == "inplace" for lay in layouts)
    return layouts, PlacementReport(placed, len(layouts), reasons)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def partial_pages(lay: BlobLayout, page: int = PAGE_SIZE) -> int:
    """Pages of the blob's reservation that some slot touches without covering them whole: the pages
    the fully-covered release rule (``boundary_release="off"``) can never hand back."""
    partial: set[int] = set()
    for slot, extent in zip(lay.slots, lay.extents):
        if extent <= 0:
            continue
        if slot % page:
            partial.add(slot // page)
        if (slot + extent) % page:
            partial.add((slot + extent - 1) // page)
    return len(partial)


def leak_bound_pages(layouts: Sequence[BlobLayout], page: int = PAGE_SIZE) -> int:
    """The most pages a cache over ``layouts`` can leave committed with release off (0: nothing to leak)."""
    return sum(partial_pages(lay, page) for lay in layouts)
