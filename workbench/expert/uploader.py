"""How a session's landed slices reach the device: plain copies from the cache's pageable memory, or
through a small ring of page-locked slots (``--uploader pageable|pinned``).

The cache lives in anonymous memory whose pages are committed and handed back slice by slice
(:mod:`workbench.expert.memory`), so it cannot itself be page-locked: a page released while registered
would leave the device reading a page the process no longer maps. A copy from pageable memory goes
through the driver's own bounce at its own pace: on the H200 (2026-12-03, docs/benchmarks/session-misses-h200.md)
a warm session's decode thread waited 0.33 s of a 0.44 s turn for uploads, 1.87 GB at about 5.6 GB/s.

:class:`PinnedUploader` copies each slice into a free slot of a
:class:`~workbench.upload.staging.StagingRing` (numpy's copy, which releases the GIL for the lanes) and
issues the slot's asynchronous copy at once, so the next slice's memcpy runs while the last one's DMA
does; a slice larger than a slot goes in slot-sized pieces, and a slot is refilled only after its fence
(the ring's rule). ``drain`` waits for every copy, as the pageable uploader's does.

Measured on the H200 (2026-12-03 17:24, warm 2 GiB MoE GGUF, 8 x 8, n = 6 paired): pinned against
pageable tok/s 0.96x [0.83-1.15], the upload stall 0.348 against 0.324 s a turn — either way one thread
copies the slices out of the cache's 4 KiB pages at ~5.6 GB/s; the DMA was not what held the turn. Not
the default; kept to repeat the measurement and as the place a multi-threaded copy would go.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from workbench.errors import ParamError
from workbench.upload.base import Device, DeviceBuffer
from workbench.upload.staging import StagingRing

UPLOADERS = ("pageable", "pinned")
SLOT_BYTES = 4 << 20  # two huge pages: a slice of a few MiB goes in one or two pieces
SLOTS = 8


class PageableUploader:
    """Plain copies from the cache's (pageable) memory."""

    def __init__(self, device: Device):
        self.device = device

    def put(self, arena: DeviceBuffer, at: int, view: memoryview) -> None:
        self.device.copy_h2d(arena, at, view)

    def drain(self) -> None:
        self.device.synchronize()

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return "pageable copies from the cache"


class LockedUploader(PageableUploader):
    """Asynchronous copies straight from a page-locked cache (``placement="pool"``: :mod:`workbench.expert.pool`):
    no staging, no bounce of the driver's; ``drain`` waits for them all."""

    def put(self, arena: DeviceBuffer, at: int, view: memoryview) -> None:
        self.device.copy_h2d(arena, at, view, asynchronous=True)

    def describe(self) -> str:
        return "asynchronous copies straight from the page-locked pool"


class PinnedUploader:
    """Each slice copied into a page-locked slot, then sent by the slot's asynchronous copy."""

    def __init__(self, device: Device, slot_bytes: int = SLOT_BYTES, slots: int = SLOTS):
        self.device = device
        self.ring = StagingRing(device, slots, slot_bytes, provision="first-read")
        self.slot_bytes = slot_bytes

    def put(self, arena: DeviceBuffer, at: int, view: memoryview) -> None:
        src = np.frombuffer(view, dtype=np.uint8)
        try:
            for off in range(0, len(src), self.slot_bytes):
                n = min(self.slot_bytes, len(src) - off)
                slot = self.ring.acquire()  # its last copy is done: the ring waited its fence
                try:
                    with slot.view[:n] as piece:
                        np.copyto(np.frombuffer(piece, dtype=np.uint8), src[off : off + n])
                        self.ring.filled(slot)  # registered after its first fill faulted it in
                        self.device.copy_h2d(arena, at + off, piece, asynchronous=True)
                finally:
                    self.ring.release(slot)  # fenced behind the copy just issued
        finally:
            del src  # the cache's view must be releasable when this returns

    def drain(self) -> None:
        self.device.synchronize()

    def close(self) -> None:
        self.ring.close()

    def describe(self) -> str:
        return f"through page-locked staging ({self.ring.describe()})"


class ParallelUploads:
    """Any uploader's ``put`` run by ``threads`` copy threads, slices handed out as they come (``--upload-threads``).

    Why: either uploader spends its time copying each slice out of the cache's 4 KiB pages on one thread
    (the driver's bounce or the pinned slots' fill; ~5.6 GB/s on the H200 against 11.5 for one thread's
    memcpy), while the lanes sit idle. Measured on the H200 (2026-12-03 18:20, warm 2 GiB MoE GGUF, 8 turns x 8
    tokens, pinned uploads, n = 6 paired): 4 threads halved the turn's upload stall (0.365 -> 0.182 s) and
    the reads' stall grew by as much (0.031 -> 0.227 s): tok/s 1.01x [0.89-1.03]. Kept to repeat it.
    ``drain`` waits for every slice put so far (all of them, even after one failed: the caller releases
    the cache's views after it), raises the first failure, then drains the inner uploader."""

    def __init__(self, inner: PageableUploader | PinnedUploader, threads: int):
        self.inner, self.threads = inner, threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="upload")
        self._pending: list[Future[None]] = []

    def put(self, arena: DeviceBuffer, at: int, view: memoryview) -> None:
        self._pending.append(self._pool.submit(self.inner.put, arena, at, view))

    def drain(self) -> None:
        pending, self._pending = self._pending, []
        errors = [f.exception() for f in pending]  # waits for each
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        self.inner.drain()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.inner.close()

    def describe(self) -> str:
        return f"{self.inner.describe()}, by {self.threads} copy threads"


def open_uploader(kind: str, device: Device, threads: int = 1, locked: bool = False
                  ) -> PageableUploader | PinnedUploader | ParallelUploads:
    """The uploader a session asked for, run by ``threads`` copy threads when more than one (one
    ParamError line for an unknown one); ``locked``: the cache is page-locked (a pool), so the default
    (``pageable``) copies go asynchronously straight from it."""
    if kind not in UPLOADERS:
        raise ParamError("session", "uploader", f"{kind!r} is not one of {', '.join(UPLOADERS)}")
    if not isinstance(threads, int) or threads < 1:
        raise ParamError("session", "upload_threads", f"must be an integer >= 1, got {threads!r}")
    inner = PinnedUploader(device) if kind == "pinned" else LockedUploader(device) if locked else PageableUploader(device)
    return inner if threads == 1 else ParallelUploads(inner, threads)
