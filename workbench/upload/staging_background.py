"""``provision="background"``: a thread provisions a staging ring's slots one by one (upload/staging.py)."""
from __future__ import annotations

import time
from typing import Any

from workbench.errors import ThreadsStuck
from workbench.upload import joins
from workbench.upload.pinned import PinnedBlock
from workbench.upload.slot import Slot


def provision_in_background(ring: Any, t0: float) -> None:
    """One block and fence per slot of ``ring``, each handed out as soon as it is ready; stops when the
    ring's ``_stop`` is set. A failure is kept in ``ring.error`` and a ``None`` wakes a waiter, which
    raises it (:meth:`~workbench.upload.staging.StagingRing.acquire`)."""
    i = 0
    try:
        for i in range(ring.wanted):
            if ring._stop.is_set():
                return
            block = PinnedBlock(ring.device, ring.slot_bytes, ring.source)
            ring._blocks.append(block)  # before the fence: close releases it whatever follows
            slot = Slot(i, block.view[:], ring.device.create_fence())
            ring.slots.append(slot)
            ring._free.put(slot)
            if i == 0:
                ring.first_slot_s = time.perf_counter() - t0
        ring.provisioned_s = time.perf_counter() - t0
    except BaseException as exc:  # noqa: BLE001 - raised by acquire, in the threads that need slots
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(f"staging ring: provisioning slot {i + 1} of {ring.wanted} "
                         f"({ring.slot_bytes / 2**20:g} MiB) in the background failed")
        ring.error = exc
        ring._free.put(None)  # wakes a waiter, which passes it on


def stop_background(ring: Any) -> None:
    """Stop ``ring``'s provisioning thread and join it within :data:`~workbench.upload.joins.STOP_GRACE_S`
    (a slot is one allocation and one fence); still running then, :class:`ThreadsStuck` says where."""
    ring._stop.set()
    stuck = joins.join_within([ring._thread])
    if stuck:
        raise ThreadsStuck("staging ring", joins.STOP_GRACE_S, stuck)
