"""One thread talks to the device for a staged load; its readers only read.

Why (issue 25, H200, 2026-12-03, docs/benchmarks/sizes-h200.md "Second pass"): when every reader
registers its own slot, issues its own copies, records and waits its own fences, those calls queue on
the driver's lock behind each other — at 256 MiB the readers' summed slot-making, copy issue and fence
waits were 139, 134 and 127 ms with 16 readers and 38, 26 and 32 ms with 8, against 7.7 ms of pread a
reader. A :class:`Copier` takes every one of those calls off the readers:

* a reader takes a free slot from the ring (its fence already passed: no device call), preads a window
  into it and :meth:`~Copier.submit` s the slot with the window's copies (a queue put, no device call);
* the *issuer* thread, in submission order, registers a ``first-read`` slot the first time it is filled
  (:meth:`StagingRing.filled`), issues its copies and records its fence, then hands it to
* the *retirer* thread, which waits the fences in the order they were recorded (one stream: they pass
  in that order) and puts each slot back on the ring's free queue.

The ring is shared as before (slots made by the readers that first need them); what changes is who
calls the driver: two threads, one issuing and one waiting, whatever the number of readers.

Errors: the first error either thread raises stops the readers (the ``stop`` event they poll while
waiting for a slot), the rest of the queued work is dropped (a failed load's staging is closed by the
ring, which waits every recorded fence), and :meth:`Copier.finish` raises it in the loading thread.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Sequence

from workbench.errors import ThreadsStuck
from workbench.upload import joins
from workbench.upload.base import Device
from workbench.upload.slot import Slot
from workbench.upload.staged_read import Piece  # a copy out of a slot: start, nbytes, buffer, dst
from workbench.upload.staging import StagingRing


class Copier:
    """The issuer and retirer threads of one staged load over ``ring`` (see the module docstring).

    Time is summed per activity in microseconds: ``register_us`` (first-read slots registered),
    ``issue_us`` (copy calls and fence records), ``fence_us`` (the retirer waiting for fences).
    """

    def __init__(self, device: Device, ring: StagingRing, name: str = "copier"):
        self.device, self.ring, self.name = device, ring, name
        self._work: queue.Queue[tuple[Slot, Sequence[Piece]] | None] = queue.Queue()  # never SimpleQueue: lanes.py
        self._done: queue.Queue[Slot | None] = queue.Queue()
        self.error: BaseException | None = None
        self.stop: threading.Event | None = None
        self.register_us = self.issue_us = self.fence_us = 0
        self.copies = self.windows = 0
        self._threads: list[threading.Thread] = []
        self._finished = False
        ring.registered_by = "the copier"  # said in the ring's staging fact

    def start(self, stop: threading.Event) -> None:
        """Start both threads; ``stop`` is the event the readers poll (set here on a failure)."""
        self.stop = stop
        for target, role in ((self._issue, "issuer"), (self._retire, "retirer")):
            t = threading.Thread(target=target, daemon=True, name=f"{self.name}-{role}")
            self._threads.append(t)
            t.start()

    def submit(self, slot: Slot, copies: Sequence[Piece]) -> None:
        """Hand over a filled ``slot`` and the copies out of it; the slot is the copier's until it is
        back on the ring's free queue (after its copies are done)."""
        self._work.put((slot, copies))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self.stop is not None:
            self.stop.set()

    def _issue(self) -> None:
        clock, device, ring = time.perf_counter_ns, self.device, self.ring
        try:
            while True:
                item = self._work.get()
                if item is None:
                    return
                if self.error is not None:
                    continue  # failed: drop the rest (the ring's close waits every recorded fence)
                slot, copies = item
                t0 = clock()
                ring.filled(slot)  # a first-read slot: registered now that its first fill faulted it in
                t1 = clock()
                view = slot.view
                for c in copies:
                    with view[c.start : c.start + c.nbytes] as src:
                        device.copy_h2d(c.buffer, c.dst, src, asynchronous=True)
                device.record_fence(slot.fence)
                self.register_us += (t1 - t0) // 1000
                self.issue_us += (clock() - t1) // 1000
                self.copies += len(copies)
                self.windows += 1
                self._done.put(slot)
        except BaseException as exc:  # noqa: BLE001 - raised by finish(), in the loading thread
            self._fail(exc)
            while self._work.get() is not None:  # drain until the sentinel
                pass
        finally:
            self._done.put(None)

    def _retire(self) -> None:
        clock, device, ring = time.perf_counter_ns, self.device, self.ring
        try:
            while True:
                slot = self._done.get()
                if slot is None:
                    return
                if self.error is not None:
                    continue
                t0 = clock()
                device.wait_fence(slot.fence)  # recorded after the slot's copies: they are done
                self.fence_us += (clock() - t0) // 1000
                ring.hand_back(slot)
        except BaseException as exc:  # noqa: BLE001 - raised by finish(), in the loading thread
            self._fail(exc)

    def finish(self) -> None:
        """Every reader is done: let the threads issue and retire what is queued, join them, and raise
        the first error either raised (idempotent)."""
        self.close()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Stop after the queued work and join both threads, raising nothing (an error path's cleanup;
        threads still running :data:`~workbench.upload.joins.STOP_GRACE_S` later: ``error``, ThreadsStuck)."""
        if self._finished:
            return
        self._finished = True
        self._work.put(None)
        stuck = joins.join_within(self._threads)  # each unit is one copy call or one fence: bounded
        if stuck and self.error is None:
            self.error = ThreadsStuck(self.name, joins.STOP_GRACE_S, stuck)

    def counters(self) -> dict[str, Any]:
        return {"copier_register_us": self.register_us, "copier_issue_us": self.issue_us,
                "copier_fence_us": self.fence_us}
