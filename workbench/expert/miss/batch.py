"""A layer's misses read and uploaded together (``--batch-misses``, issue 34 §5).

Without it, every miss is one job on a lane (one future, the in-flight meter's lock twice) and, on
the decode thread, one wait, one completion and one upload after another, the upload only once the
read is done: on the H200 (2026-12-03) warm misses reached 6.1 GB/s, 0.25 of the ring's rate, the
decode thread copying slice after slice out of the cache.

With it, :meth:`BatchedMisses.plan` looks the layer's keys up as before, then hands its misses to the
lanes as at most ``lanes`` batches (grouped by reader kind and file, split evenly): each batch is one
job that reads its slices into their cache slots and uploads each at once from the lane — so reads
and uploads of a layer run side by side on every lane, and with ``overlap`` while the previous layer
computes. Two layers are then in the arena at once (the one computing, the one landing), so the
arena is twice a layer and the halves alternate layer by layer (:attr:`BatchedMisses.halves`).
:meth:`BatchedMisses.land` uploads the hits from the decode thread, waits for the batches, counts
each read, drains the device and unpins, in the layer's key order as before (``--verify`` checks
every slice byte for byte against the file, as it does unbatched).

A batch is one read in the lanes' meter (``read_busy_s`` is the time a batch was in flight, its
upload included, so ``staged_gbps`` here is bytes to the device over that time: a stricter figure
than the unbatched one, whose uploads ran outside the lanes). Not with a predictor (``--prefetch``
other than route) nor on the one-thread session (one lane, no overlap): :func:`check_batch`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ParamError
from workbench.expert.cache import SliceKey
from workbench.expert.decode import SLOT_ALIGN


def check_batch(batch: bool, lanes: int, overlap: bool, prefetch: str) -> None:
    """ParamError (one line) where batched misses cannot run."""
    if not batch:
        return
    if lanes == 1 and not overlap:
        raise ParamError("session", "batch_misses", "needs reader lanes: --lanes 2 or more, or --overlap")
    if overlap and prefetch != "route":
        raise ParamError("session", "batch_misses", f"runs with --prefetch route, not {prefetch!r} (a predictor "
                                                    "stages its reads one by one)")


@dataclass
class BatchPlan:
    """A layer planned in batches: its keys, their arena offsets, and the lanes' jobs."""

    keys: list[SliceKey]
    at: dict[SliceKey, int]
    batches: list[tuple[Any, list[SliceKey], str]] = field(default_factory=list)  # (handle, keys, reader kind)
    reads: dict[SliceKey, Any] = field(default_factory=dict)  # unused: what LayerPlan's users look for


class BatchedMisses:
    """Plans and lands layers with their misses batched (see the module docstring)."""

    halves = 2

    def __init__(self, layer_bytes: int):
        self.layer_bytes = layer_bytes  # one half of the arena: the largest layer's landed span
        self._flip = 0

    def plan(self, d: Any, t: int, i: int) -> BatchPlan:
        keys = d.device_keys(t, i, d.route(t, i))
        base, self._flip = self._flip * self.layer_bytes, self._flip ^ 1
        at, where = {}, base
        for key in keys:
            at[key] = where
            where += -(-d.cache.layouts[key.blob].slice(key.expert)[1] // SLOT_ALIGN) * SLOT_ALIGN
        plan = BatchPlan(keys, at)
        groups: dict[tuple[str, str], list[SliceKey]] = {}
        for key in keys:
            kind = d.lookup(key)
            if kind is not None:
                groups.setdefault((kind, d.cache.file_of(key)), []).append(key)
        lanes = d.lanes.lanes
        for (kind, file), misses in groups.items():
            n = min(lanes, len(misses))
            for j in range(n):
                part = misses[j::n]
                job = lambda reader, part=part: self._read_and_upload(d, reader, part, at)  # noqa: E731
                plan.batches.append((d.lanes.submit(job, kind, file), part, kind))
        return plan

    @staticmethod
    def _read_and_upload(d: Any, reader: Any, part: list[SliceKey], at: dict[SliceKey, int]) -> list[Any]:
        """On a lane: each slice read into its slot, then its upload issued from there; (outcome, view)
        each — the views stay alive until the decode thread has drained the uploads (an uploader with copy
        threads copies them later), then it releases them."""
        done = []
        for key in part:
            outcome = d.cache.fill(key, reader)
            view = d.cache.view(key)
            done.append((outcome, view))
            d.uploader.put(d.arena, at[key], view)
        return done

    def land(self, d: Any, plan: BatchPlan) -> list[tuple[SliceKey, int, int]]:
        missed = {key for _, part, _ in plan.batches for key in part}
        views, waited = [], 0
        try:
            t0 = time.perf_counter()
            for key in plan.keys:
                if key not in missed:  # a hit: its bytes are in the cache already
                    view = d.cache.view(key)
                    views.append(view)
                    d.uploader.put(d.arena, plan.at[key], view)
            d.timers.upload += time.perf_counter() - t0
            for n, (handle, part, kind) in enumerate(plan.batches):
                t0 = time.perf_counter()
                done = d.lanes.wait(handle)
                t1 = time.perf_counter()
                views += [view for _, view in done]
                waited = n + 1
                for key, (outcome, _) in zip(part, done):
                    d.cache.complete(key, outcome, kind)
                d.timers.read += t1 - t0
                d.timers.bookkeeping += time.perf_counter() - t1
            t0 = time.perf_counter()
            d.uploader.drain()
            d.timers.upload += time.perf_counter() - t0
        except BaseException:
            for handle, _, _ in plan.batches[waited:]:  # no lane may still write a slot or the arena once unpinned
                try:
                    views += [view for _, view in d.lanes.wait(handle)]
                except BaseException:
                    pass
            try:
                d.uploader.drain()  # nor a copy thread read a view once released
            except BaseException:
                pass
            raise
        finally:
            d.let_go(views, plan.keys)
        landed = [(key, plan.at[key], d.cache.layouts[key.blob].slice(key.expert)[1]) for key in plan.keys]
        d._landed(landed)
        return landed
