"""The decode loop of a session: per token and MoE layer, route, look up, read the misses, upload, compute.

One layer, on the decode thread::

    plan    route k experts (stall: routing); look every (blob, expert) up in the cache; admit the
            misses (evicting, pinning) and hand their reads to the lanes
    land    in order: a hit is copied to the device from the cache, a miss once its read is done
            (stall: read), then the copies are drained (stall: upload) and the entries unpinned
    ahead   with ``overlap``, the next layer is planned now, so its misses are read while ...
    compute ... this layer computes over the bytes it just landed (compute)

``schedule="eager"`` (:mod:`workbench.expert.eager`, handed in as ``eager``) plans the next layer inside ``land``, once this
layer's hits are sent and before its misses are waited for, so the lanes never wait for the drain.

The cache's bookkeeping on this thread — lookups, admissions (the mincore gate, evictions and their
madvise), completions, unpins — is timed on its own (bookkeeping), so a change to the gate or the
policy shows there and not as a change in compute.

The routing of the next layer is known ahead because it comes from a trace: overlap here is the
write-up's route-ahead with a perfect predictor (``--prefetch route``). With a predictor instead
(:mod:`workbench.expert.prefetch`), ``ahead`` stages what it names and the layer lands through its
stage (the routing looked up when the layer comes). Nothing is read ahead across a turn's end.
Each token's seconds and stall (read + upload + route) are kept as it ends (:class:`Timers`). With one
inline lane and no overlap the layer is staged slice by slice instead (look up or read, copy, drain,
release), as the one-thread session always was: a cache of one slice still works there.
Uploads go through a :class:`SliceUploader` (``put`` then ``drain``); the default copies pageable
memory with :meth:`Device.copy_h2d`, a staged one (:mod:`workbench.expert.uploader`) takes its place
without touching the loop.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterator, Protocol, Sequence

from workbench.expert.cache import ExpertCache, SliceKey
from workbench.expert.compute import LayerCompute
from workbench.expert.lanes import LanePool
from workbench.expert.routing import RoutingTrace
from workbench.upload.base import DeviceBuffer

SLOT_ALIGN = 256  # each landed slice starts here in the arena: any compute dtype can view it


class SliceUploader(Protocol):
    """Copies landed slices to the device: ``put`` issues one, ``drain`` returns once all are done
    (after it, the sources may be reused or evicted)."""

    def put(self, arena: DeviceBuffer, at: int, view: memoryview) -> None: ...

    def drain(self) -> None: ...


@dataclass
class Timers:
    """Seconds of the decode thread, by cause (reset per turn)."""

    compute: float = 0.0
    read: float = 0.0
    upload: float = 0.0
    route: float = 0.0
    bookkeeping: float = 0.0  # the cache's: lookup, admit (gate, evict, madvise), complete, unpin
    host_compute: float = 0.0  # misses computed on the host where they lie (--miss host|auto: expert.miss)
    landed_bytes: int = 0
    token_s: list[float] = field(default_factory=list)  # each token's seconds (workbench.records.token_tail)
    token_stall_s: list[float] = field(default_factory=list)  # of them, read + upload + route

    @property
    def stall(self) -> float:
        return self.read + self.upload + self.route


@dataclass
class LayerPlan:
    keys: list[SliceKey]
    reads: dict[SliceKey, tuple[Any, str]] = field(default_factory=dict)  # miss → (lane handle, reader kind)


def arena_slots(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Offsets of ``sizes`` landed back to back at :data:`SLOT_ALIGN`, and the bytes they span."""
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += -(-n // SLOT_ALIGN) * SLOT_ALIGN
    return out, at


class Decoder:
    """Runs tokens over ``trace`` through ``cache``, ``lanes``, ``uploader`` and ``compute``."""

    def __init__(self, cache: ExpertCache, lanes: LanePool, uploader: SliceUploader, arena: DeviceBuffer,
                 compute: LayerCompute, trace: RoutingTrace, by_layer: dict[int, list[int]], overlap: bool,
                 on_upload: Callable[[SliceKey, int, int], None] | None = None, prefetch: Any = None,
                 miss: Any = None, batch: Any = None, eager: Any = None):
        self.cache, self.lanes, self.uploader, self.arena = cache, lanes, uploader, arena
        self.compute, self.trace, self.by_layer, self.overlap = compute, trace, by_layer, overlap
        self.on_upload = on_upload
        self.prefetch = prefetch  # a PrefetchStage (workbench.expert.prefetch): stages its predictor's experts ahead
        self.batch = batch  # a BatchedMisses (workbench.expert.miss.batch): a layer's misses read and uploaded together
        self.miss = miss  # a MissServer (workbench.expert.miss): which misses the host computes where they lie
        self.eager = eager  # schedule="eager" (workbench.expert.eager.land_eager): the next layer planned inside land
        self.timers = Timers()
        self.last_landed: list[tuple[SliceKey, int, int]] = []

    def run(self, first_token: int, tokens: int) -> None:
        """Decode ``tokens`` tokens from ``first_token``; nothing is left in flight afterwards."""
        steps = [(t, i) for t in range(first_token, first_token + tokens) for i in range(len(self.trace.layers))]
        ahead: Any = None
        serial, stage = self.lanes.inline and not self.overlap, self.prefetch
        eager = self.eager if stage is None and not serial and self.batch is None else None
        mark = (time.perf_counter(), self.timers.stall)
        for n, (t, i) in enumerate(steps):
            if n and i == 0:
                mark = self._token_done(mark)
            before = self._fetch_mark()
            following = steps[n + 1] if self.overlap and n + 1 < len(steps) else None
            if serial:
                landed = self._land_serial(t, i)
            elif stage is not None:
                landed = stage.land(self, t, i, ahead)
            elif eager is not None:
                landed, ahead = eager(self, ahead if ahead is not None else self._plan(t, i), following)
            else:
                landed = self._land(ahead if ahead is not None else self._plan(t, i))
            if eager is None:
                ahead = None if following is None else \
                    stage.ahead(self, *following) if stage is not None else self._plan(*following)
            t0 = time.perf_counter()
            self.compute.run(self.arena, [(k.blob, at, size) for k, at, size in landed])
            self.timers.compute += (device_s := time.perf_counter() - t0)
            if self.miss is not None:  # the layer's misses served on the host, and what auto learns
                waits, rest = self._fetch_since(before)
                self.timers.host_compute += self.miss.step_done(t, i, waits, rest - device_s, device_s)
            self.last_landed = landed
        if stage is not None:
            stage.finish(self)
        self._token_done(mark)

    def _token_done(self, mark: tuple[float, float]) -> tuple[float, float]:
        """Close the token begun at ``mark`` (its start, the stall then); the next one's mark."""
        now, stall = time.perf_counter(), self.timers.stall
        self.timers.token_s.append(round(now - mark[0], 9))
        self.timers.token_stall_s.append(round(stall - mark[1], 9))
        return now, stall

    # --- what a prefetch stage drives (workbench.expert.prefetch.stage) --------------------------
    def route(self, t: int, i: int) -> list[int]:
        """Token ``t``'s experts in layer position ``i`` (timed: the routing stall)."""
        t0 = time.perf_counter()
        experts = self.trace.token(t)[i].tolist()
        self.timers.route += time.perf_counter() - t0
        return experts

    def lookup(self, key: SliceKey) -> str | None:
        return self._lookup(key)

    def submit_read(self, key: SliceKey, kind: str) -> Any:
        """Start reading an admitted entry on a lane; the handle to wait on."""
        return self.lanes.submit(lambda reader: self.cache.fill(key, reader), kind, self.cache.file_of(key))

    def land(self, plan: LayerPlan) -> list[tuple[SliceKey, int, int]]:
        return self._land(plan)

    def plan(self, t: int, i: int) -> Any:
        """Route, look up and admit token ``t``'s layer ``i``, its misses handed to the lanes."""
        return self._plan(t, i)

    def record_landed(self, landed: list[tuple[SliceKey, int, int]]) -> None:
        self._landed(landed)

    @contextlib.contextmanager
    def timed(self, cause: str) -> Iterator[None]:
        """Add the block's seconds to the timer of ``cause`` (read, upload, route, bookkeeping)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self.timers, cause, getattr(self.timers, cause) + time.perf_counter() - t0)

    def _keys(self, t: int, i: int) -> list[SliceKey]:
        return self.device_keys(t, i, self.route(t, i))

    def device_keys(self, t: int, i: int, routed: Sequence[int], staged: Collection[int] = ()) -> list[SliceKey]:
        """The keys of the routed experts landed on the device (with ``--miss host|auto`` the miss
        server keeps the others, to compute on the host once the layer has run); ``staged``: experts this
        layer's prefetch read (in the cache already, but misses: the miss server counts them fetched)."""
        experts = routed if self.miss is None else self.miss.split(t, i, routed, staged)
        return [SliceKey(blob, e) for e in experts for blob in self.by_layer[self.trace.layers[i]]]

    def _fetch_mark(self) -> tuple[float, float]:
        return self.timers.read + self.timers.bookkeeping, time.perf_counter()

    def _fetch_since(self, mark: tuple[float, float]) -> tuple[float, float]:
        """Since ``mark`` (a layer's landing began; overlap's planning ahead too): (read wait + bookkeeping,
        the rest of the wall: uploads, the loop, the device compute)."""
        waits = self.timers.read + self.timers.bookkeeping - mark[0]
        return waits, time.perf_counter() - mark[1] - waits

    def _land_serial(self, t: int, i: int) -> list[tuple[SliceKey, int, int]]:
        """One slice at a time on this thread: look up or read it, copy it, drain, let it go."""
        landed, at = [], 0
        for key in self._keys(t, i):
            kind = self._lookup(key)
            if kind is not None:
                t0 = time.perf_counter()
                try:
                    outcome = self.lanes.wait(self.lanes.submit(
                        lambda reader, key=key: self.cache.fill(key, reader), kind, self.cache.file_of(key)))
                except BaseException:
                    self.cache.unpin(key)
                    raise
                t1 = time.perf_counter()
                self.cache.complete(key, outcome, kind)
                self.timers.read += t1 - t0
                self.timers.bookkeeping += time.perf_counter() - t1
            view = self.cache.view(key)
            nbytes = len(view)
            try:
                t0 = time.perf_counter()
                self.uploader.put(self.arena, at, view)
                self.uploader.drain()
                self.timers.upload += time.perf_counter() - t0
            finally:
                view.release()
                t0 = time.perf_counter()
                self.cache.unpin(key)
                self.timers.bookkeeping += time.perf_counter() - t0
            landed.append((key, at, nbytes))
            at += -(-nbytes // SLOT_ALIGN) * SLOT_ALIGN
        self._landed(landed)
        return landed

    def _lookup(self, key: SliceKey) -> str | None:
        """Pin ``key``: None on a hit, else admit it (timed as bookkeeping) and return its reader kind."""
        t0 = time.perf_counter()
        try:
            return None if self.cache.lookup(key, pin=True) else self.cache.admit(key)
        finally:
            self.timers.bookkeeping += time.perf_counter() - t0

    def _plan(self, t: int, i: int) -> Any:
        if self.batch is not None:
            return self.batch.plan(self, t, i)
        plan = LayerPlan(self._keys(t, i))
        for key in plan.keys:
            kind = self._lookup(key)
            if kind is not None:
                plan.reads[key] = (self.submit_read(key, kind), kind)
        return plan

    def _land(self, plan: Any) -> list[tuple[SliceKey, int, int]]:
        if self.batch is not None:
            return self.batch.land(self, plan)
        landed, views, at = [], [], 0
        try:
            for key in plan.keys:
                if key in plan.reads:
                    handle, kind = plan.reads[key]
                    t0 = time.perf_counter()
                    outcome = self.lanes.wait(handle)
                    t1 = time.perf_counter()
                    self.cache.complete(key, outcome, kind)
                    self.timers.read += t1 - t0
                    self.timers.bookkeeping += time.perf_counter() - t1
                view = self.cache.view(key)
                views.append(view)
                t0 = time.perf_counter()
                self.uploader.put(self.arena, at, view)
                self.timers.upload += time.perf_counter() - t0
                landed.append((key, at, len(view)))
                at += -(-len(view) // SLOT_ALIGN) * SLOT_ALIGN
            t0 = time.perf_counter()
            self.uploader.drain()
            self.timers.upload += time.perf_counter() - t0
        finally:
            self.let_go(views, plan.keys)
        self._landed(landed)
        return landed

    def let_go(self, views: Sequence[memoryview], keys: Sequence[SliceKey]) -> None:
        """A layer landed: release its cache views and unpin its keys (timed as bookkeeping)."""
        for view in views:
            view.release()
        t0 = time.perf_counter()
        for key in keys:
            self.cache.unpin(key)
        self.timers.bookkeeping += time.perf_counter() - t0

    def _landed(self, landed: list[tuple[SliceKey, int, int]]) -> None:
        self.timers.landed_bytes += sum(n for _, _, n in landed)
        if self.on_upload is not None:
            for key, where, n in landed:
                self.on_upload(key, where, n)
