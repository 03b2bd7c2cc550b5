"""The decode loop's side of a predictor: stage what it names ahead of a layer, then land the layer.

``ahead(t, i)`` runs where the loop plans the next layer (while this one computes, with ``overlap``):
the predictor names experts for layer ``i`` of token ``t``; a named entry already live is pinned (kept
from eviction, no lookup counted), any other is admitted and read on a lane. Unless the layer runs on
the host: the miss server fixes the layer's way as it is planned (``MissServer.plan_way``: ``--miss
host``, or an ``auto`` token the host computes, every expert where it lies), and such a layer stages
nothing — what the predictor named is counted as skipped, not scored (it is still asked, so a seeded
oracle names the same experts for a layer whichever way the layers before it ran). ``land(t, i, ahead)``
runs when the layer comes: its routing is read and told to the predictor, the named set scored
against it, and every routed entry looked up — one this layer's prefetch admitted is waited for (it
was counted a miss when admitted, as the route-ahead counts its reads), one an earlier prefetch left
is a hit (waited for if its read is still in flight), any other a hit or a miss read now. Named
live entries the layer did not route are unpinned before those lookups (they may be evicted for a
routed miss). Entries read ahead and not routed stay pinned until their reads end (settled, without waiting, at the next
layer; waited for at the turn's end, or when a routed miss needs the budget they hold), then are
ordinary cache entries. A prefetch the budget cannot take is dropped (counted), never a failure.

So a turn's ``hits + misses`` are its routed lookups whatever the predictor: the session takes the
entries its prefetch read for layers that did not route to them (:attr:`PrefetchStage.unused_entries`)
out of the cache's miss count.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ParamError
from workbench.expert.cache import SliceKey
from workbench.expert.decode import LayerPlan
from workbench.expert.prefetch.predictors import Predictor
from workbench.expert.prefetch.tally import PrefetchTally


@dataclass
class Ahead:
    """What was staged for one layer: the named experts, entries pinned live, reads started."""

    named: list[int]
    pinned: list[SliceKey] = field(default_factory=list)
    reads: dict[SliceKey, tuple[Any, str]] = field(default_factory=dict)
    skipped: bool = False  # planned to run on the host: nothing staged, not scored


class PrefetchStage:
    """Stages ``predictor``'s experts ahead through a :class:`~workbench.expert.decode.Decoder`."""

    def __init__(self, predictor: Predictor):
        self.predictor = predictor
        self.tally = PrefetchTally()  # this turn's; the session replaces it per turn
        self.unused_entries = 0  # this turn's entries read ahead for a layer that did not route them
        self._leftover: dict[SliceKey, tuple[Any, str]] = {}  # such reads still pinned (in flight or not settled)
        self._unused: dict[SliceKey, int] = {}  # read ahead, used by no token yet → bytes

    @property
    def description(self) -> str:
        return self.predictor.description

    def reset_turn(self) -> None:
        self.tally, self.unused_entries = PrefetchTally(), 0

    def ahead(self, d: Any, t: int, i: int) -> Ahead:
        named = [int(e) for e in dict.fromkeys(self.predictor.predict(t, i))]
        miss = getattr(d, "miss", None)
        if miss is not None and miss.plan_way(t, i) == "host":
            return self._skip(d, i, named)
        staged = Ahead(named)
        for key in (SliceKey(blob, e) for e in named for blob in d.by_layer[d.trace.layers[i]]):
            if key in staged.reads or key in staged.pinned:
                continue
            with d.timed("bookkeeping"):
                if key in d.cache:
                    d.cache.pin(key)
                    staged.pinned.append(key)
                    continue
                try:
                    kind = d.cache.admit(key)
                except ParamError:  # the budget is held by entries in use: this one is not staged
                    self.tally.prefetch_dropped += 1
                    continue
            staged.reads[key] = (d.submit_read(key, kind), kind)
            nbytes = d.cache.layouts[key.blob].slice(key.expert)[1]
            self.tally.prefetch_bytes += nbytes
            self._evicted_unused(key)
            self._unused[key] = nbytes
        return staged

    def _skip(self, d: Any, i: int, named: list[int]) -> Ahead:
        """A layer the host computes: nothing staged; what would have been read, counted."""
        keys = [SliceKey(blob, e) for e in named for blob in d.by_layer[d.trace.layers[i]]]
        with d.timed("bookkeeping"):
            absent = [key for key in keys if key not in d.cache]
        self.tally.prefetch_skipped_layers += 1
        self.tally.prefetch_skipped_named += len(named)
        self.tally.prefetch_skipped_bytes += sum(d.cache.layouts[k.blob].slice(k.expert)[1] for k in absent)
        return Ahead(named, skipped=True)

    def land(self, d: Any, t: int, i: int, staged: Ahead | None) -> list[tuple[SliceKey, int, int]]:
        self._settle(d)
        routed = d.route(t, i)
        self.predictor.observe(t, i, routed)
        if staged is not None and not staged.skipped:
            self.tally.score(staged.named, routed)
        fresh = {key.expert for key in staged.reads} if staged is not None else set()
        keys = d.device_keys(t, i, routed, fresh) if hasattr(d, "device_keys") else \
            [SliceKey(blob, e) for e in routed for blob in d.by_layer[d.trace.layers[i]]]  # --miss: expert.miss
        plan, again, kept = LayerPlan(keys), [], []
        own = staged.reads if staged is not None else {}
        if staged is not None:  # what was staged and not routed is let go before the routed lookups need room
            routed_keys = set(keys)
            self._left_unused(d, staged, routed_keys)
            kept = [key for key in staged.pinned if key in routed_keys]
            with d.timed("bookkeeping"):
                for key in staged.pinned:
                    if key not in routed_keys:
                        d.cache.unpin(key)
        for key in keys:
            if key in self._unused and key not in d.cache:  # read ahead, evicted, routed only now
                self._evicted_unused(key)
            late = self._unused.pop(key, None)
            if late is not None and key not in own:  # read ahead for another layer, a hit now
                self.tally.prefetch_late_bytes += late
            if key in own:
                plan.reads[key] = own[key]  # pinned by its admission; counted a miss then
                continue
            kind = self._lookup(d, key)
            if key in self._leftover:  # live (a hit) but read by an earlier layer's prefetch: wait for it
                plan.reads[key] = self._leftover.pop(key)
                again.append(key)  # its admission's pin, released once it is landed
            elif kind is not None:
                plan.reads[key] = (d.submit_read(key, kind), kind)
        landed = d.land(plan)
        with d.timed("bookkeeping"):
            for key in again + kept:
                d.cache.unpin(key)
        return landed

    def _lookup(self, d: Any, key: SliceKey) -> str | None:
        """A routed lookup; when the budget is held by reads ahead nobody routed, they are finished and
        let go first (a demand miss never fails for a prefetch's sake)."""
        try:
            return d.lookup(key)
        except ParamError:
            if not self._leftover:
                raise
        self._settle(d, wait=True)
        return d.lookup(key)

    def finish(self, d: Any) -> None:
        """The turn's end: every prefetch read waited for and released; what is still unused, tallied."""
        self._settle(d, wait=True)
        with d.timed("bookkeeping"):
            for key in [k for k in self._unused if k not in d.cache]:
                self._evicted_unused(key)
        self.tally.prefetch_idle_bytes = sum(self._unused.values())

    def _left_unused(self, d: Any, staged: Ahead, routed: set[SliceKey]) -> None:
        for key, read in staged.reads.items():
            if key not in routed:
                self._leftover[key] = read
                self.unused_entries += 1
                self.tally.prefetch_unused_bytes += d.cache.layouts[key.blob].slice(key.expert)[1]

    def _settle(self, d: Any, wait: bool = False) -> None:
        """Complete and unpin the leftover reads that are done (all of them with ``wait``)."""
        for key, (handle, kind) in list(self._leftover.items()):
            if wait or handle.done():
                with d.timed("read"):
                    outcome = d.lanes.wait(handle)
                with d.timed("bookkeeping"):
                    d.cache.complete(key, outcome, kind)
                    d.cache.unpin(key)
                del self._leftover[key]

    def _evicted_unused(self, key: SliceKey) -> None:
        nbytes = self._unused.pop(key, None)
        if nbytes is not None:
            self.tally.prefetch_never_used_bytes += nbytes
