"""A layer's misses read and uploaded together (``--batch-misses``, issue 34 §5).

Without it, every miss is one job on a lane (one future, the in-flight meter's lock twice) and, on
the decode thread, one wait, one completion and one upload after another, the upload only once the
read is done: on the H200 (2026-12-04) warm misses were read at 4.57 GB/s, 0.18 of the ring's rate,
while the decode thread copied every landed slice, hit or miss, from pageable memory at ~5 GB/s.

With it, :meth:`BatchedMisses.plan` looks the layer's keys up as before, lays the misses out first in
the arena (grouped by reader kind and file) and the hits after them, and hands them to the lanes as
contiguous runs: at most ``lanes`` miss jobs a group, each reading its slices into their cache slots
and sending them on through page-locked slots (:class:`~.lane_stage.LaneStaging`: one asynchronous copy
per slot-full, no device call per slice), and at most ``lanes`` hit jobs, which only send. So a layer's
reads and uploads run side by side on every lane, and with ``overlap`` while the previous layer
computes. Two layers are then in the arena at once (the one computing, the one landing), so the arena
is twice a layer and the halves alternate layer by layer (:attr:`BatchedMisses.halves`).
:meth:`BatchedMisses.land` waits for the jobs, counts each read, waits for the device and unpins
(``--verify`` checks every slice byte for byte against the file, as it does unbatched).

A miss job is one read in the lanes' meter (``read_busy_s`` is the time a miss job was in flight, its
copies to the device included, so ``staged_gbps`` here is the misses' bytes to the device over that
time: a stricter figure than the unbatched one, whose uploads ran outside the lanes); hit jobs run
outside the meter. Where the lanes' time goes is :attr:`BatchedMisses.tally`. Not with a predictor
(``--prefetch`` other than route), on the one-thread session (one lane, no overlap), nor with
``--uploader pinned`` or ``--upload-threads`` (the lanes stage through their own slots): :func:`check_batch`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ParamError
from workbench.expert.cache import SliceKey
from workbench.expert.decode import SLOT_ALIGN
from workbench.expert.miss.lane_stage import LaneStaging, StageTally
from workbench.upload.base import Device


def check_batch(batch: bool, lanes: int, overlap: bool, prefetch: str, uploader: str = "pageable",
                threads: int = 1) -> None:
    """ParamError (one line) where batched misses cannot run."""
    if not batch:
        return
    if lanes == 1 and not overlap:
        raise ParamError("session", "batch_misses", "needs reader lanes: --lanes 2 or more, or --overlap")
    if overlap and prefetch != "route":
        raise ParamError("session", "batch_misses", f"runs with --prefetch route, not {prefetch!r} (a predictor "
                                                    "stages its reads one by one)")
    if uploader != "pageable" or threads != 1:
        raise ParamError("session", "batch_misses", "stages through the lanes' own page-locked slots: leave "
                                                    "--uploader and --upload-threads at their defaults")


@dataclass
class BatchPlan:
    """A layer planned in batches: its keys, their arena offsets, and the lanes' jobs."""

    keys: list[SliceKey]
    at: dict[SliceKey, int]
    batches: list[tuple[Any, list[SliceKey], str | None]] = field(default_factory=list)  # (handle, keys, reader
    # kind; None: a hit job)
    reads: dict[SliceKey, Any] = field(default_factory=dict)  # unused: what LayerPlan's users look for


def runs(keys: list[SliceKey], n: int) -> list[list[SliceKey]]:
    """``keys`` cut into at most ``n`` contiguous runs of nearly equal length (none empty)."""
    n = min(n, len(keys))
    return [keys[j * len(keys) // n : (j + 1) * len(keys) // n] for j in range(n)]


class BatchedMisses:
    """Plans and lands layers with their misses batched (see the module docstring)."""

    halves = 2

    def __init__(self, layer_bytes: int, device: Device, lanes: int, locked: bool = False):
        self.layer_bytes = layer_bytes  # one half of the arena: the largest layer's landed span
        self._flip = 0
        self.staging = LaneStaging(device, lanes, direct=locked)  # locked: the cache is a page-locked pool
        self.tally = StageTally()  # the lanes' time, every job of every layer landed so far

    def plan(self, d: Any, t: int, i: int) -> BatchPlan:
        keys = d.device_keys(t, i, d.route(t, i))
        groups: dict[tuple[str, str], list[SliceKey]] = {}
        hits = []
        for key in keys:
            kind = d.lookup(key)
            if kind is None:
                hits.append(key)
            else:
                groups.setdefault((kind, d.cache.file_of(key)), []).append(key)
        base, self._flip = self._flip * self.layer_bytes, self._flip ^ 1
        at, where = {}, base
        for key in [k for misses in groups.values() for k in misses] + hits:  # misses first, then hits
            at[key] = where
            where += -(-d.cache.layouts[key.blob].slice(key.expert)[1] // SLOT_ALIGN) * SLOT_ALIGN
        plan = BatchPlan(keys, at)
        send, arena, lanes = self.staging.send, d.arena, d.lanes.lanes
        for (kind, file), misses in groups.items():
            for part in runs(misses, lanes):
                job = lambda reader, part=part: send(d.cache, reader, part, at, arena)  # noqa: E731
                plan.batches.append((d.lanes.submit(job, kind, file), part, kind))
        for part in runs(hits, lanes):
            plan.batches.append((d.lanes.submit_plain(lambda part=part: send(d.cache, None, part, at, arena)),
                                 part, None))
        return plan

    def land(self, d: Any, plan: BatchPlan) -> list[tuple[SliceKey, int, int]]:
        waited = 0
        try:
            for n, (handle, part, kind) in enumerate(plan.batches):
                t0 = time.perf_counter()
                outcomes, tally = d.lanes.wait(handle)
                t1 = time.perf_counter()
                waited = n + 1
                self.tally.add(tally)
                if kind is None:  # a hit job: copies only
                    d.timers.upload += t1 - t0
                    continue
                for key, outcome in zip(part, outcomes):
                    d.cache.complete(key, outcome, kind)
                d.timers.read += t1 - t0
                d.timers.bookkeeping += time.perf_counter() - t1
            t0 = time.perf_counter()
            self.staging.device.synchronize()  # the slots' copies have landed: the layer may compute
            d.timers.upload += time.perf_counter() - t0
        except BaseException:
            for handle, _, _ in plan.batches[waited:]:  # no lane may still write a slot or the arena once unpinned
                try:
                    d.lanes.wait(handle)
                except BaseException:
                    pass
            try:
                self.staging.device.synchronize()  # nor a copy still be reading a slot or writing the arena
            except BaseException:
                pass
            raise
        finally:
            d.let_go([], plan.keys)  # the lanes released their views of the cache
        landed = [(key, plan.at[key], d.cache.layouts[key.blob].slice(key.expert)[1]) for key in plan.keys]
        d._landed(landed)
        return landed

    def close(self) -> None:
        self.staging.close()

    def describe(self) -> str:
        return self.staging.describe()
