"""The one small interface every device backend implements (host, cuda, hip)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from workbench.errors import DeviceError
from workbench.registry import Availability
from workbench.upload.buffer import DeviceBuffer

if TYPE_CHECKING:
    from workbench.upload.compute import DeviceCompute


@dataclass(frozen=True)
class DeviceInfo:
    """What a result needs to know about the device it was measured on."""

    backend: str  # registry name: host, host-uma, cuda, hip
    name: str  # e.g. "NVIDIA H200", "host memory"
    arch: str  # e.g. "sm_90", "gfx1100", "x86_64"
    uma: bool  # device memory and the page cache share physical RAM
    memory_bytes: int
    driver: str = ""
    binding: str = ""  # binding package and version, e.g. "cuda-python 13.0"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeviceUsage:
    """What a device holds for its callers right now: live allocations, page-locked host memory and
    events. A load that ends, or fails half-way, must leave these where they were before it."""

    buffers: int = 0
    buffer_bytes: int = 0
    pinned: int = 0
    pinned_bytes: int = 0
    registered: int = 0
    registered_bytes: int = 0
    events: int = 0
    fences: int = 0


def carve(sizes: Sequence[int], align: int) -> tuple[list[int], int]:
    """Offsets of ``sizes`` packed in order, each ``align``-aligned, and the total they span."""
    offsets, pos = [], 0
    for n in sizes:
        if n < 0:
            raise ValueError(f"cannot allocate {n} B")
        pos = -(-pos // align) * align
        offsets.append(pos)
        pos += n
    return offsets, pos


class Fence:
    """A reusable marker in a device's copy order (one per staging slot): :meth:`Device.record_fence`
    puts it after every copy issued so far, :meth:`Device.wait_fence` blocks until they are done.

    ``event`` is the backend's handle; ``recorded`` says whether it was recorded since its last wait.
    """

    __slots__ = ("event", "recorded")

    def __init__(self, event: Any = None):
        self.event, self.recorded = event, False


class HostStaging:
    """Page-locked (pinned) host memory a backend can DMA from; ``view`` is a writable memoryview.

    ``write_combined``: the memory is write-combined (cudaHostAllocWriteCombined /
    hipHostMallocWriteCombined): writes skip the cache — no read-for-ownership on the destination —
    and the DMA out of it may be faster, but a CPU read of it is uncached and very slow, so nothing
    may read it back (the GPU backends refuse it as a read-back destination)."""

    __slots__ = ("nbytes", "view", "handle", "locked", "write_combined")

    def __init__(self, nbytes: int, view: memoryview, handle: Any = None, locked: bool = True,
                 write_combined: bool = False):
        self.nbytes, self.view, self.handle, self.locked = nbytes, view, handle, locked
        self.write_combined = write_combined


class LockedMeter:
    """Page-locked host memory a device holds (pinned, registered), now and at its highest since the
    last :meth:`reset` — what a load cost in locked RAM, even when it freed its staging before the end.
    Thread-safe: a ring's slots are pinned by a background thread while readers run."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.now = {"pinned": 0, "registered": 0}
        self.peak = dict(self.now)

    def add(self, kind: str, nbytes: int) -> None:
        with self._lock:
            self.now[kind] += nbytes
            self.peak[kind] = max(self.peak[kind], self.now[kind])

    def remove(self, kind: str, nbytes: int) -> None:
        with self._lock:
            self.now[kind] -= nbytes

    def reset(self) -> None:
        with self._lock:
            self.peak = dict(self.now)


class Device(ABC):
    """A device backend. Copies take any buffer-protocol source: bytes, memoryview of an mmap, pinned."""

    name: ClassVar[str]

    @property
    def locked(self) -> LockedMeter:
        """Pinned and registered host bytes, now and at their peak (backends that lock memory feed it)."""
        meter = self.__dict__.get("_locked_meter")
        if meter is None:
            meter = self.__dict__["_locked_meter"] = LockedMeter()
        return meter

    @classmethod
    @abstractmethod
    def available(cls) -> Availability:
        """Whether this backend can open a device here; the reason when not (module, driver, device)."""

    @abstractmethod
    def info(self) -> DeviceInfo: ...

    @abstractmethod
    def alloc(self, nbytes: int) -> DeviceBuffer: ...

    @abstractmethod
    def free(self, buf: DeviceBuffer) -> None: ...

    def alloc_many(self, sizes: Sequence[int], align: int = 256) -> list[DeviceBuffer]:
        """One buffer per size, each ``align``-aligned. Backends carve them from one allocation (one
        driver call instead of one per tensor); every buffer is still bounds-checked on its own and
        freed on its own, the memory going back when the last of them is freed."""
        return [self.alloc(n) for n in sizes]

    def adopt(self, ptr: int, nbytes: int, owner: Any) -> DeviceBuffer:
        """Take over ``nbytes`` of device memory at ``ptr`` that ``owner`` keeps allocated (a peer
        loader's tensor), without copying it: reads, copies and verification then treat it like any
        buffer, and :meth:`free` (or :meth:`close`) only drops the reference to ``owner``.

        Backends that can address such memory override this; the default refuses.
        """
        raise DeviceError(getattr(self, "name", type(self).__name__), "adopt", "unsupported",
                          "this backend cannot take over memory it did not allocate")

    @abstractmethod
    def copy_h2d(self, dst: DeviceBuffer, dst_offset: int, src: Any, *, asynchronous: bool = False) -> None:
        """Copy all of ``src`` (buffer protocol) to ``dst`` at ``dst_offset``.

        ``asynchronous`` lets a backend return before the copy finishes (only safe from pinned or
        registered memory); :meth:`synchronize` or an event waits for it.
        """

    @abstractmethod
    def synchronize(self) -> None: ...

    def host_view(self, buf: DeviceBuffer) -> memoryview | None:
        """A writable view of ``buf`` where this device's memory is host memory the CPU writes itself
        (the host backends): a loader reads straight into it, with no staging hop. None on a device
        that is reached by copies (every GPU backend)."""
        return None

    @abstractmethod
    def read_back(self, buf: DeviceBuffer, offset: int, nbytes: int) -> bytes:
        """Copy device bytes back to the host, for verification after the timed window."""

    def read_back_into(self, buf: DeviceBuffer, offset: int, dest: memoryview) -> None:
        """Copy ``len(dest)`` device bytes into ``dest`` (ideally pinned staging: no extra host copy).

        Backends override this; the default goes through :meth:`read_back`.
        """
        dest[:] = self.read_back(buf, offset, len(dest))

    def record_event(self) -> Any:
        """A marker after every copy issued so far; :meth:`wait_event` blocks until it passes."""
        return None

    def wait_event(self, event: Any) -> None:
        if event is not None:
            self.synchronize()

    # Fences: built here on record_event/wait_event (an event per use); GPU backends keep one driver
    # event per fence instead, re-recorded on every use, so a staging slot costs no create/destroy.
    def create_fence(self) -> Fence:
        return Fence()

    def record_fence(self, fence: Fence) -> None:
        """Put ``fence`` after every copy issued so far (wait on it first if it is still pending)."""
        self.wait_fence(fence)
        fence.event, fence.recorded = self.record_event(), True

    def wait_fence(self, fence: Fence) -> None:
        """Block until the copies before the fence's last record are done; no-op if never recorded."""
        if fence.recorded:
            event, fence.event, fence.recorded = fence.event, None, False
            self.wait_event(event)

    def destroy_fence(self, fence: Fence) -> None:
        self.wait_fence(fence)

    @abstractmethod
    def alloc_pinned(self, nbytes: int, write_combined: bool = False) -> HostStaging:
        """Page-locked host memory; ``write_combined`` asks for write-combined memory, which a backend
        may not have (``HostStaging.write_combined`` says what was given)."""

    @abstractmethod
    def free_pinned(self, staging: HostStaging) -> None: ...

    @abstractmethod
    def register_host(self, view: memoryview) -> Any:
        """Page-lock an existing host range for DMA (cudaHostRegister and kin); returns a handle, or
        None when the OS or driver refuses (RLIMIT_MEMLOCK, …) — callers fall back and say so."""

    @abstractmethod
    def unregister_host(self, handle: Any) -> None: ...

    def compute(self) -> "DeviceCompute":
        """Matrix products over this device's buffers (:mod:`workbench.upload.compute`); backends that
        can compute override this, the default refuses."""
        raise DeviceError(getattr(self, "name", type(self).__name__), "compute", "unsupported",
                          "this backend runs no matrix products")

    def usage(self) -> DeviceUsage | None:
        """Live allocations, pinned and registered host memory and events (None: not counted here)."""
        return None

    def close(self) -> None:
        """Release the device context; buffers still alive are freed."""

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
