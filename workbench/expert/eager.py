"""``schedule="eager"``: a layer's landing that keeps the lanes busy through the upload drain.

The default loop (:mod:`workbench.expert.decode`, the write-up's) lands a layer in routing order — a hit
is sent, a miss is waited for and sent — drains the copies, and only then plans the next layer, so the
lanes sit idle from this layer's last read until the next layer's reads are issued: through the upload
tail, the drain and the admissions. Eager lands a layer in three steps on the decode thread:

1. send every hit (its bytes are in the cache already) — the copy engine starts at once;
2. plan the next layer (route, look up, admit, hand its reads to the lanes), so they queue behind
   this layer's reads;
3. wait for each of this layer's misses in the order its read was issued, and send it; drain.

Each slice goes to the same arena slot as in routing order, and the landed list keeps that order, so
what computes and what is verified is unchanged. It needs ``overlap`` (the next layer's routing known
ahead, as the trace gives it) and the routing's own prefetch; two layers' routed slices are pinned at
once, so the cache must hold both. Admissions see this layer's entries pinned: under LRU they are the
most recent and would not be chosen anyway; another policy may choose other victims than the default
loop does. Meant with ``placement="pool"``, whose sends are asynchronous copies.
"""
from __future__ import annotations

import time

from workbench.errors import ParamError
from workbench.expert.cache import SliceKey
from workbench.expert.decode import Decoder, LayerPlan, arena_slots

SCHEDULES = ("landed", "eager")


def check_schedule(schedule: str, overlap: bool, prefetch: str, batch: bool) -> None:
    """ParamError (one line) where ``schedule`` cannot run."""
    if schedule not in SCHEDULES:
        raise ParamError("session", "schedule", f"{schedule!r} is not one of {', '.join(SCHEDULES)}")
    if schedule == "landed":
        return
    if not overlap:
        raise ParamError("session", "schedule", "eager plans the next layer while this one lands: it needs --overlap")
    if prefetch != "route":
        raise ParamError("session", "schedule", f"eager runs with --prefetch route, not {prefetch!r} (a predictor "
                                                "lands through its own stage)")
    if batch:
        raise ParamError("session", "schedule", "eager is the unbatched landing: not with --batch-misses")


def land_eager(decoder: Decoder, plan: LayerPlan, following: tuple[int, int] | None
               ) -> tuple[list[tuple[SliceKey, int, int]], LayerPlan | None]:
    """Land ``plan`` on ``decoder`` as the module says; the landed slices and the plan of ``following``
    (the next (token, layer) step; None: nothing planned)."""
    cache, timers = decoder.cache, decoder.timers
    slots, _ = arena_slots([cache.layouts[key.blob].slice(key.expert)[1] for key in plan.keys])
    landed: list[tuple[SliceKey, int, int] | None] = [None] * len(plan.keys)
    views: list[memoryview] = []
    ahead = None
    try:
        for hits in (True, False):
            if not hits and following is not None:
                ahead = decoder.plan(*following)
            for n, key in enumerate(plan.keys):
                if (key in plan.reads) == hits:
                    continue
                if not hits:
                    handle, kind = plan.reads[key]
                    t0 = time.perf_counter()
                    outcome = decoder.lanes.wait(handle)
                    t1 = time.perf_counter()
                    cache.complete(key, outcome, kind)
                    timers.read += t1 - t0
                    timers.bookkeeping += time.perf_counter() - t1
                view = cache.view(key)
                views.append(view)
                t0 = time.perf_counter()
                decoder.uploader.put(decoder.arena, slots[n], view)
                timers.upload += time.perf_counter() - t0
                landed[n] = (key, slots[n], len(view))
        t0 = time.perf_counter()
        decoder.uploader.drain()
        timers.upload += time.perf_counter() - t0
    finally:
        decoder.let_go(views, plan.keys)
    done = [x for x in landed if x is not None]
    decoder.record_landed(done)
    return done, ahead
