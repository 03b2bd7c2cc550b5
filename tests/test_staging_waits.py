"""Every wait for staging (a ``lanes`` token, a :class:`StagingRing` slot) ends once its stop is set.

The hang it guards: CI, 2026-12-03, ``test_strategies_hygiene.py::...[lanes[evict=True]-safetensors-shards]``
waited 600 s joining lane ``lanes-1``, parked in ``tokens.get(timeout=0.05)`` with its stop set. On
CPython 3.11 a ``queue.SimpleQueue.get(timeout=...)`` woken by a ``put`` whose item another consumer
takes first re-arms its wait with what is left of its timeout — negative once the woken thread got
the GIL back after its deadline, and a negative timeout waits forever (until the next ``put``). Lanes
and ring readers are several consumers on one free list; a loaded 2-core machine keeps a woken thread
off the GIL for 50 ms. When the loading thread's copy failed, nobody put anything back: the lane
waited forever and the join with it. (The thread's repr said "stopped" only because pytest-timeout's
exception, raised inside ``join``, makes CPython 3.11 mark a live thread stopped: bpo-45274's handler.)

Here the same interleaving is made deterministic: the thread that hands the token back keeps the GIL
(a long switch interval) while another consumer takes the token and until the parked waiter's deadline
has passed.
"""
from __future__ import annotations

import ast
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from workbench.strategies.lanes import _Staging
from workbench.upload import open_device
from workbench.upload.staging import StagingRing

PRODUCT = Path(__file__).resolve().parent.parent / "workbench"


def _spin(seconds: float) -> None:
    """Hold the GIL (no call here releases it) for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def stolen_wakeup_then_stop(acquire: Callable[[threading.Event], Any], release: Callable[[Any], None],
                            held: Any) -> None:
    """A waiter parks in ``acquire``; ``held`` is handed back (waking it) and taken by another
    consumer before the waiter runs again, past its poll deadline; then stop is set: the waiter
    must return None (within 10 s: a loaded box schedules it late; a broken wait never returns)."""
    stop = threading.Event()
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(acquire(stop)), daemon=True, name="waiting-lane")
    waiter.start()
    time.sleep(0.02)  # the waiter is parked in its timed wait
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # this thread keeps the GIL: the woken waiter cannot run
    try:
        release(held)  # the loading thread hands a token back: the parked waiter is woken ...
        taken = acquire(stop)  # ... and another lane takes the token first
        assert taken is not None
        _spin(0.15)  # the waiter's 50 ms poll is over before it holds the GIL again
    finally:
        sys.setswitchinterval(interval)
    stop.set()
    waiter.join(10.0)  # a stuck waiter waits for the next put, forever; a loaded box may take a while to run it
    stuck = waiter.is_alive()
    release(taken)  # also what frees a stuck waiter: the broken wait ends only at the next put
    waiter.join(5.0)
    assert not stuck, "a staging wait outlived its stop by 10 s (woken, robbed, past its deadline)"
    assert got == [None]


def test_a_lane_waiting_for_a_token_ends_when_stopped_after_a_stolen_wakeup() -> None:
    staging = _Staging(None, 1, 4096, pinned=False)  # type: ignore[arg-type]  # pageable: no context used
    token = staging.acquire(threading.Event())
    stolen_wakeup_then_stop(staging.acquire, staging.release, token)


def test_a_ring_reader_waiting_for_a_slot_ends_when_stopped_after_a_stolen_wakeup() -> None:
    with open_device("host") as device:
        ring = StagingRing(device, 1, 4096)
        try:
            slot = ring.acquire()
            stolen_wakeup_then_stop(ring.acquire, ring.release, slot)
        finally:
            ring.close()


def test_the_product_uses_no_simple_queue() -> None:
    """The class, wherever it would come back: CPython 3.11's SimpleQueue timed get can wait forever
    with several consumers (above); the product's queues are ``queue.Queue`` (a condition's timed wait)."""
    uses: set[str] = set()
    for path in sorted(PRODUCT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else \
                [node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)]
            if "SimpleQueue" in names:
                uses.add(f"{path.relative_to(PRODUCT.parent)}:{node.lineno}")
    assert not uses, f"queue.SimpleQueue in the product (use queue.Queue): {sorted(uses)}"
