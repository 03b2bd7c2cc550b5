"""The staging pipeline: a small ring of page-locked slots that reader threads fill and copy out of.

Every strategy that stages through pinned memory uses :class:`StagingRing`. A slot is taken from a
shared free queue, its fence is waited on (the copies that last read it are done), the caller fills it
and issues its own asynchronous copies, and :meth:`StagingRing.release` records the slot's fence after
those copies and hands the slot back. Several threads may do this at once on one device stream; every
device call involved releases the GIL in the bindings measured (cuda-bindings 13.3, the H200 profile);
or one :class:`~workbench.upload.copier.Copier` makes those calls for every reader.

Provisioning is what costs (0.2–0.43 s/GiB of fresh page-locked memory on the H200 VM, not faster with
threads), so the ring is small (readers + a few MiB-sized slots) from an anonymous mapping on huge pages,
populated, then registered (``register_host``); where registration is refused, from ``alloc_pinned``. Source
``wc``: write-combined ``alloc_pinned`` slots: a pread into them skips the read-for-ownership of every
destination line (H200, 2026-12-01, 16 readers into 8 MiB slots: 45.6 GB/s against 40.3 into default
pinned slots), but the CPU must never read them — nothing here does (preads write them, the DMA reads
them, verification reads into its own buffer, the GPU backends refuse a read-back into them); the host
backend has none and says so (``write_combined`` fact INERT). Both the provisioning and the release happen inside the load window, where a loader pays them; with
``provision="background"`` a thread provisions the slots one by one (a block each) while the ring is
already in use, so the first reader waits for one slot instead of the whole ring; with
``provision="readers"`` each slot is provisioned by the reader that first takes it, so the slots' first
touch and registration run in the readers, side by side and beside the reads of slots already made,
and nothing is provisioned before the first read (issue 25: on the H200 the upfront ring was 28-43 ms
of a 50 ms load of 256 MiB); with ``provision="first-read"`` a reader's slot is a mapping advised onto
huge pages and nothing more: the reader's first pread into it faults its pages in (side by side in
every reader, where populating them serialized machine-wide on the H200), and :meth:`StagingRing.filled`
registers it before the copies out of it are issued (``alloc``/``wc`` sources are allocated page-locked,
as with ``readers``); with ``mapping="one"`` those slots are carved from one mapping made with the ring
(upload/slab.py).
"""
from __future__ import annotations

import queue
import threading
import time
from workbench.records import Engaged
from workbench.upload.base import Device
from workbench.upload.pinned import HUGE_PAGE, MADV_POPULATE_WRITE, SOURCES, PinnedBlock
from workbench.upload.slab import MAPPINGS, Slab, carve_ring
from workbench.upload.slot import Held, Slot
from workbench.upload.staging_background import provision_in_background, stop_background
from workbench.upload.staging_plan import size_ring

PROVISIONS = ("upfront", "background", "readers", "first-read")

__all__ = ["HUGE_PAGE", "MADV_POPULATE_WRITE", "MAPPINGS", "PROVISIONS", "SOURCES", "PinnedBlock", "Slot",
           "StagingRing", "size_ring"]


class StagingRing:
    """``slots`` page-locked slots of ``slot_bytes`` shared by any number of threads.

    ``acquire`` → fill ``slot.view`` → issue asynchronous copies from it → ``release``; or the
    :meth:`slot` context manager, which releases even when the caller raises (the fence then covers
    whatever copies were issued). :meth:`close` waits for every fence and returns the memory.

    ``provision``: ``upfront`` (one block for every slot, registered before the constructor returns)
    or ``background`` (a thread provisions one block per slot, one at a time, and hands each slot to
    :meth:`acquire` as soon as it is ready: the first reader waits for one slot, not the whole ring;
    :meth:`close` stops that thread first, so a load that finishes early provisions fewer slots) or
    ``readers`` (the first :meth:`acquire` of a slot provisions it, in the caller's thread: readers
    make their own slots at once; ``reader_provision_s`` sums the time they spent on it) or
    ``first-read`` (as ``readers``, but the slot is only mapped: the caller's fill faults it in and
    :meth:`filled` registers it; ``reader_provision_s`` sums both, ``register_s`` the registering).
    ``mapping`` (``first-read`` with source ``auto``/``anon`` only; nothing for any other provision or
    source): ``each`` (each slot its own mapping and fence, made by its reader) or ``one`` (one mapping
    for every slot and every slot's fence made by the constructor, in ``provision_s``; a reader carves its
    slot, :class:`~workbench.upload.slab.Slab`). ``nbytes`` counts the slots made (carved) so far: a slot
    never taken was never touched and holds no memory, only address space.
    A background provisioning failure is raised by :meth:`acquire` (every waiter, and every later
    call); :meth:`close` still releases what was provisioned.

    ``provision_s`` / ``release_s`` are what the ring cost the load window (the constructor's and
    :meth:`close`'s time); ``first_slot_s`` / ``provisioned_s``: from the start until the first slot /
    every slot was ready (None until then; the same as ``provision_s`` upfront).
    """

    def __init__(self, device: Device, slots: int, slot_bytes: int, *, source: str = "auto",
                 provision: str = "upfront", mapping: str = "each"):
        if slots < 1 or slot_bytes < 1:
            raise ValueError(f"a staging ring needs slots >= 1 and slot_bytes >= 1, got {slots} x {slot_bytes}")
        if source not in SOURCES:
            raise ValueError(f"staging source {source!r} is not one of {', '.join(SOURCES)}")
        if provision not in PROVISIONS:
            raise ValueError(f"staging provision {provision!r} is not one of {', '.join(PROVISIONS)}")
        if mapping not in MAPPINGS:
            raise ValueError(f"staging mapping {mapping!r} is not one of {', '.join(MAPPINGS)}")
        t0 = time.perf_counter()
        self.device, self.slot_bytes, self.source, self.provision, self.wanted = device, slot_bytes, source, provision, slots
        # None: provisioning failed. Not a SimpleQueue: its timed get can wait forever on 3.11 (see lanes.py)
        self._free: queue.Queue[Slot | None] = queue.Queue()
        self._closed = False
        self.release_s = 0.0
        self.first_slot_s: float | None = None
        self.provisioned_s: float | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.block: PinnedBlock | None = None  # upfront: the one block behind every slot
        self._blocks: list[PinnedBlock] = []
        self.slots: list[Slot] = []  # background, readers: grows as slots are ready; final once closed
        self.reader_provision_s = 0.0
        self._made = threading.Lock()
        self._unmade: list[Slot] = []  # readers: placeholders, made by the first acquire that needs one
        self._deferred = provision == "first-read" and source in ("auto", "anon")
        self.deferred_made, self.registered_by, self.register_s = 0, "", 0.0  # first-read: mapped bare, registered later
        self.slab: Slab | None = None  # mapping one: the one mapping every first-read slot is carved from
        if self._deferred and mapping == "one":
            self.slab, self._unmade = carve_ring(device, slots, slot_bytes)
        elif provision in ("readers", "first-read"):
            self._unmade = [Slot(i, None, None) for i in reversed(range(slots))]  # type: ignore[arg-type]
        if provision in ("readers", "first-read"):
            self.provision_s = time.perf_counter() - t0
            self._t0 = t0
        elif provision == "upfront":
            self.block = PinnedBlock(device, slots * slot_bytes, source)
            self._blocks.append(self.block)
            self.slots = [Slot(i, self.block.view[i * slot_bytes : (i + 1) * slot_bytes], device.create_fence())
                          for i in range(slots)]
            for slot in self.slots:
                self._free.put(slot)
            self.provision_s = self.first_slot_s = self.provisioned_s = time.perf_counter() - t0
        else:
            self._thread = threading.Thread(target=provision_in_background, args=(self, t0), daemon=True,
                                            name="staging-provision")
            self._thread.start()
            self.provision_s = time.perf_counter() - t0

    def _failed(self, slot: Slot | None) -> None:
        """Raise the provisioning error (handing ``slot`` back, or the wake-up on to the next waiter)."""
        self._free.put(slot)
        assert self.error is not None
        raise self.error

    @property
    def how(self) -> str:
        """How the slots' memory was obtained; background with mixed blocks: the weakest of them
        (``none`` while nothing is provisioned)."""
        hows = {b.how for b in self._blocks}
        for how in ("unlocked", "pending", "pinned", "write-combined", "registered"):
            if how in hows:
                return how
        return "none"

    @property
    def locked(self) -> bool:
        """Every slot provisioned so far is page-locked (and there is at least one)."""
        return bool(self._blocks) and all(b.locked for b in self._blocks)

    @property
    def nbytes(self) -> int:
        """Host memory held by the ring (background: provisioned so far)."""
        return sum(b.nbytes for b in self._blocks)

    def acquire(self, stop: threading.Event | None = None) -> Slot | None:
        """A free slot whose earlier copies are done; None if ``stop`` is set while waiting. Raises the
        background provisioning's error once it has failed."""
        if self.error is not None:
            raise self.error
        if self._unmade:  # readers: a free made slot first, else make one, else wait for one
            slot = self._made_or_unmade()
            if slot is not None:
                return slot
        if stop is None:
            slot = self._free.get()
        else:
            slot = None
            while slot is None:
                if stop.is_set():
                    return None
                try:
                    slot = self._free.get(timeout=0.05)
                except queue.Empty:
                    continue
                if slot is None:
                    self._failed(None)
        if slot is None or self.error is not None:
            self._failed(slot)
        self.device.wait_fence(slot.fence)
        return slot

    def _made_or_unmade(self) -> Slot | None:
        """``readers``: a made slot that is free now, else an unmade one made now (None: neither)."""
        try:
            slot = self._free.get_nowait()
        except queue.Empty:
            with self._made:
                slot = self._unmade.pop() if self._unmade else None
            if slot is not None:
                self._make(slot)
                return slot
            return None
        self.device.wait_fence(slot.fence)
        return slot

    def _make(self, slot: Slot) -> None:
        """``readers``: provision ``slot`` in the calling thread (a slot that fails goes back unmade):
        slots are made only while every made one is busy, so a load makes as many as it keeps in use."""
        t0 = time.perf_counter()
        deferred, source = self._deferred, self.source
        if self.provision == "first-read" and source == "auto" and not deferred:
            source = "alloc"  # a first-read slot's registration was refused: the rest are allocated locked
        try:
            block = (self.slab.carve(slot.index) if deferred and self.slab is not None else
                     PinnedBlock(self.device, self.slot_bytes, source, deferred=deferred))
        except BaseException:
            with self._made:
                self._unmade.append(slot)
            raise
        with self._made:
            self._blocks.append(block)
            slot.view = block.view[:]
            slot.fence = self.device.create_fence() if slot.fence is None else slot.fence  # one: made already
            slot.pending = block if deferred else None
            self.deferred_made += deferred
            self.slots.append(slot)
            now = time.perf_counter()
            self.reader_provision_s += now - t0
            if self.first_slot_s is None:
                self.first_slot_s = now - self._t0
            if len(self.slots) == self.wanted:
                self.provisioned_s = now - self._t0

    def filled(self, slot: Slot) -> None:
        """The caller has filled ``slot`` and is about to copy out of it: a ``first-read`` slot filled
        for the first time is registered now (its fill faulted its pages in). Where the device refuses
        (source ``auto``), the slot stays unlocked and the slots made after it are ``alloc_pinned``."""
        block = slot.pending
        if block is None:
            return
        t0 = time.perf_counter()
        slot.pending = None
        if not block.lock() and self.source == "auto":
            self._deferred = False  # registration refused: the next slots are page-locked allocations
        with self._made:
            self.register_s += time.perf_counter() - t0
            self.reader_provision_s += time.perf_counter() - t0

    def release(self, slot: Slot) -> None:
        """Fence the slot behind every copy issued so far and hand it back (a first-read slot its
        caller never said it :meth:`filled` is registered now, before anyone reuses it)."""
        if slot.pending is not None:
            self.filled(slot)
        self.device.record_fence(slot.fence)
        self._free.put(slot)

    def hand_back(self, slot: Slot) -> None:
        """Put back a slot whose fence has passed (a :class:`~workbench.upload.copier.Copier` waited it)."""
        self._free.put(slot)

    def slot(self) -> Held:
        return Held(self)

    def close(self, strict: bool = True) -> None:
        """Stop and join the background provisioning, wait for every slot's copies, then release
        fences, views and memory (idempotent); ``strict``: see :meth:`PinnedBlock.close` (a cleanup
        on an error path passes False)."""
        if self._closed:
            return
        self._closed = True
        t0 = time.perf_counter()
        try:
            if self._thread is not None:
                stop_background(self)  # joined within a bound: ThreadsStuck, never a hang
            for slot in self.slots:
                self.device.destroy_fence(slot.fence)  # waits first: no copy may still read the slot
                slot.view.release()
            for slot in self._unmade:  # mapping one: fences made with the ring for slots never taken
                if slot.fence is not None:
                    self.device.destroy_fence(slot.fence)
        finally:
            first: BaseException | None = None
            for block in (*self._blocks, *([self.slab] if self.slab else [])):  # every one, even if one fails
                try:
                    block.close(strict)
                except BaseException as exc:  # noqa: BLE001 - the first is raised below
                    first = first or exc
            self.release_s = time.perf_counter() - t0
            if first is not None:
                raise first

    def describe(self) -> str:
        """How the slots were provisioned and what it cost (:func:`~workbench.upload.staging_facts.describe_ring`)."""
        from workbench.upload.staging_facts import describe_ring

        return describe_ring(self)

    def write_combined_fact(self, backend: str = "") -> Engaged | None:
        """``write_combined: 20/20 slots ON`` when source ``wc`` was asked for (None otherwise); INERT,
        with the reason, where ``backend`` gave ordinary page-locked memory instead."""
        if self.source != "wc":
            return None
        blocks = self._blocks if self.provision != "upfront" else self._blocks * len(self.slots)
        done = sum(1 for b in blocks[: len(self.slots)] if b.how == "write-combined")
        note = "" if done == len(self.slots) else (f"unsupported on {backend or 'this backend'}: ordinary "
                                                   "page-locked slots")
        return Engaged("write_combined", done, len(self.slots), "slots", note)
