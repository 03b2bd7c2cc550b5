"""A run of a layer's slices sent to the device from a lane: packed into page-locked slots, one
asynchronous copy per slot-full (``--batch-misses``, issue 34 §5).

Why: the batched path first uploaded each slice from the lane with the session's uploader, by default
a synchronous copy from the cache's pageable memory. The driver stages a pageable copy through its own
bounce buffer one copy at a time, so the four lanes' uploads queued behind each other at its ~5 GB/s
(H200, 2026-12-04: warm misses staged at 2.94 GB/s, 0.11 of the ring). Here each lane copies its slices
out of the cache into a slot of a shared :class:`~workbench.upload.staging.StagingRing` itself (numpy's
copy releases the GIL, so the lanes copy side by side), and a slot goes to the device in one
asynchronous copy from page-locked memory once full: per slice, no device call and no lock; per slot,
one ``acquire`` (its fence), one copy and one ``release``.

The arena offsets a lane is given must run back to back (each slice at its predecessor's end rounded up
to :data:`~workbench.expert.decode.SLOT_ALIGN`, as :meth:`BatchedMisses.plan` lays them out): a slot
holds the padding between two slices too, and a gap wider than the padding starts a new slot, so no
byte outside the lane's slices is ever written. A slice larger than a slot goes in slot-sized pieces.

With a page-locked cache (``placement="pool"``: ``direct``) there are no slots: each slice goes to the device
by one asynchronous copy straight from its frame, issued by the lane that read it (or, for a hit, any lane).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np

from workbench.expert.decode import SLOT_ALIGN
from workbench.upload.base import Device, DeviceBuffer
from workbench.upload.staging import StagingRing

SLOT_BYTES = 4 << 20  # a few slices of an A3B-like expert (884,736 B) per copy
SLOTS_PER_LANE = 2  # one filling while the last one's copy runs


@dataclass
class StageTally:
    """Where a lane's time went, summed over jobs (seconds, counts)."""

    fill_s: float = 0.0  # the cache's fill: the read into the slice's slot (misses only)
    copy_s: float = 0.0  # the cache's bytes into page-locked slots
    slot_wait_s: float = 0.0  # waiting for a free slot (its last copy's fence)
    issue_s: float = 0.0  # the asynchronous copies issued and the slots' fences recorded
    slices: int = 0
    copies: int = 0  # asynchronous copies issued (slot-fulls)
    nbytes: int = 0

    def add(self, other: "StageTally") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class LaneStaging:
    """Page-locked slots the lanes pack a layer's slices into (see the module docstring)."""

    def __init__(self, device: Device, lanes: int, slot_bytes: int = SLOT_BYTES, direct: bool = False):
        self.device, self.slot_bytes = device, slot_bytes
        self.ring = None if direct else StagingRing(device, SLOTS_PER_LANE * lanes, slot_bytes, provision="first-read")

    def send(self, cache: Any, reader: Any, keys: Sequence[Any], at: dict[Any, int], arena: DeviceBuffer
             ) -> tuple[list[Any], StageTally]:
        """On a lane: each key filled with ``reader`` first (None: a hit, its bytes in the cache already),
        then its bytes copied to ``arena`` at ``at[key]`` through the slots (``direct``: straight from the cache).
        The fills' outcomes, in order, and the tally. Every view of the cache is released on return, even on error."""
        if self.ring is None:
            return self._send_direct(cache, reader, keys, at, arena)
        tally, outcomes = StageTally(), []
        slot, buf, base, used = None, None, 0, 0
        try:
            for key in keys:
                if reader is not None:
                    t0 = time.perf_counter()
                    outcomes.append(cache.fill(key, reader))
                    tally.fill_s += time.perf_counter() - t0
                view, src = cache.view(key), None
                try:
                    src = np.frombuffer(view, dtype=np.uint8)
                    n, pos, where = len(src), 0, at[key]
                    while pos < n:
                        here = where + pos
                        if slot is not None and not (base + used <= here < base + used + SLOT_ALIGN
                                                     and here < base + self.slot_bytes):
                            held, slot, buf = slot, None, None  # _flush hands it back, even on error
                            self._flush(held, base, used, arena, tally)
                        if slot is None:
                            t0 = time.perf_counter()
                            slot = self.ring.acquire()
                            buf, base, used = np.frombuffer(slot.view, dtype=np.uint8), here, 0
                            tally.slot_wait_s += time.perf_counter() - t0
                        chunk = min(n - pos, base + self.slot_bytes - here)
                        t0 = time.perf_counter()
                        buf[here - base : here - base + chunk] = src[pos : pos + chunk]
                        tally.copy_s += time.perf_counter() - t0
                        used, pos = here - base + chunk, pos + chunk
                    tally.slices += 1
                    tally.nbytes += n
                finally:
                    del src
                    view.release()
            if slot is not None:
                held, slot, buf = slot, None, None
                self._flush(held, base, used, arena, tally)
        finally:
            if slot is not None:  # an error mid-slot: the slot goes back behind whatever was issued
                del buf
                self.ring.release(slot)
        return outcomes, tally

    def _send_direct(self, cache: Any, reader: Any, keys: Sequence[Any], at: dict[Any, int], arena: DeviceBuffer
                     ) -> tuple[list[Any], StageTally]:
        """:meth:`send` from a page-locked cache: one asynchronous copy a slice, from where it lies."""
        tally, outcomes = StageTally(), []
        for key in keys:
            if reader is not None:
                t0 = time.perf_counter()
                outcomes.append(cache.fill(key, reader))
                tally.fill_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            with cache.view(key) as view:
                self.device.copy_h2d(arena, at[key], view, asynchronous=True)
                tally.nbytes += len(view)
            tally.issue_s += time.perf_counter() - t0
            tally.slices += 1
            tally.copies += 1
        return outcomes, tally

    def _flush(self, slot: Any, base: int, used: int, arena: DeviceBuffer, tally: StageTally) -> None:
        """Send the slot's ``used`` bytes to ``arena`` at ``base`` and hand the slot back."""
        t0 = time.perf_counter()
        try:
            self.ring.filled(slot)  # a first-read slot is page-locked after its first fill faulted it in
            with slot.view[:used] as piece:
                self.device.copy_h2d(arena, base, piece, asynchronous=True)
            tally.copies += 1
        finally:
            self.ring.release(slot)  # fenced behind the copy just issued
            tally.issue_s += time.perf_counter() - t0

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()

    def describe(self) -> str:
        if self.ring is None:
            return "lanes send each slice straight from the page-locked pool (one asynchronous copy a slice)"
        return f"lanes pack slices into page-locked slots ({self.ring.describe()})"
