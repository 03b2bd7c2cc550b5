"""The strategy toolkit: the public pieces a load strategy is built from (README, "Adding a strategy").

A model may be several files: every tensor names its own (``t.file``), ``ctx.fd(t)`` gives that file's
descriptor (one per file per load), and every piece below works file by file. Reading a tensor with pread, the per-read eviction policy, the plain pread → upload loop (the baseline
and every fallback), one residency probe per load, a borrowed read-only mapping of the file, the host
memory an upload may copy from, the staging ring (pinned slots with per-slot fences, shared by reader
threads), and a thread guard that always stops and joins its threads.
"""
from __future__ import annotations

import mmap
import os
import threading
from typing import Any, Callable

import numpy as np

from workbench.errors import FormatError, ThreadsStuck
from workbench.formats.index import ModelFile, TensorInfo
from workbench.io.descriptors import check_descriptors, open_checked
from workbench.io.pagecache import resident_fraction, sampled_resident_fraction
from workbench.records import MiB
from workbench.strategies.base import LoadContext
from workbench.strategies.params import check_param
from workbench.upload import joins
from workbench.upload.joins import join_within
from workbench.upload.staging import StagingRing, Slot

__all__ = ["UPLOADS", "Evictor", "FileMapping", "MiB", "Slot", "StagingRing", "ThreadGuard", "check_upload",
           "engage_staging", "engage_write_combined", "eviction_reason", "files_note", "open_mapping", "pread_into", "pread_upload",
           "probe_resident", "read_tensor", "reader_opener", "upload_borrowed"]

# The host memory an upload can copy from: the heap buffer as it is, the heap buffer page-locked for
# its copy (register_host), or page-locked staging buffers with asynchronous copies.
UPLOADS = ("pageable", "registered", "pinned")


def check_upload(owner: str, upload: str, supported: tuple[str, ...] = UPLOADS) -> None:
    """ParamError unless ``upload`` is one of the modes this strategy implements (for __post_init__)."""
    check_param(owner, "upload", upload in supported, f"one of {', '.join(supported)}, got {upload!r}")


def pread_into(fd: int, view: Any, offset: int, path: str = "") -> None:
    """Fill all of ``view`` from the file at ``offset``, looping over short reads.

    The cast view is released even on error: a traceback that kept it alive would keep pinned
    staging exported, and the cleanup's unmap would then fail and hide the real error.
    """
    with memoryview(view) as outer, outer.cast("B") as mv:
        done, total = 0, mv.nbytes
        while done < total:
            with mv[done:] as rest:
                n = os.preadv(fd, [rest], offset + done)
            if n == 0:
                raise FormatError(path, "size", f"end of file at {offset + done}, wanted {offset + total}: "
                                                "truncated since it was indexed?")
            done += n


def read_tensor(fd: int, tensor: TensorInfo) -> np.ndarray:
    """The tensor's bytes in a fresh heap buffer (what an engine's per-tensor Vec is); ``fd`` is a
    descriptor of ``tensor.file``."""
    buf = np.empty(tensor.nbytes, dtype=np.uint8)
    pread_into(fd, buf, tensor.offset, tensor.file)
    return buf


class Evictor:
    """posix_fadvise(DONTNEED) after each read when the policy says evict, else nothing.

    The kernel drops only pages a call covers fully, so a page shared by two tensors survives both
    per-tensor calls; :meth:`finish` releases those boundary pages once every read is done (the
    boundary-page rule of seeds/pr143: release a shared page only when its neighbours are gone), in
    every file of the model. Thread-safe: readers of several files may share one.
    """

    def __init__(self, ctx: LoadContext):
        self.ctx, self.enabled = ctx, ctx.evict

    def drop(self, file: str, offset: int, nbytes: int) -> None:
        """Evict ``[offset, offset + nbytes)`` of ``file`` (a model file's path) under the policy."""
        if self.enabled and nbytes > 0:
            os.posix_fadvise(self.ctx.fd(file), offset, nbytes, os.POSIX_FADV_DONTNEED)
            self.ctx.count("dontneed_calls")

    def finish(self) -> None:
        """Release each file's pages once every read is done, the whole file: the partly covered
        boundary pages (the boundary-page rule), and large folios across the data region's edges —
        the kernel drops only folios a call covers whole, and a file written or read in large pieces
        keeps a folio across its header and first tensors (on this 2-core VM, Linux 6.18 ext4,
        2026-12-01: DONTNEED from the data region's first page on left 99 % of a 2 MiB shard
        resident; from byte 0, none)."""
        if not self.enabled:
            return
        for f, tensors in self.ctx.by_file():
            if tensors:
                os.posix_fadvise(self.ctx.fd(f), 0, 0, os.POSIX_FADV_DONTNEED)
                self.ctx.count("dontneed_calls")


def settle_staged(ctx: LoadContext, ring: StagingRing, evictor: Evictor) -> None:
    """After a staged load's readers: wait for the device's copies (``sync``), release what the
    eviction policy left (``read``), hand the staging back (``staging``) — each in its own phase."""
    with ctx.phase("sync"):
        ctx.device.synchronize()
    with ctx.phase("read"):
        evictor.finish()
    with ctx.phase("staging"):
        ring.close()


def pread_upload(ctx: LoadContext, tensors: tuple[TensorInfo, ...] | None = None) -> None:
    """Per tensor: pread into a fresh heap buffer from its own file, DONTNEED if the policy evicts,
    copy to the device."""
    evictor = Evictor(ctx)
    for t in ctx.tensors if tensors is None else tensors:
        buf = ctx.place(t)
        with ctx.phase("read"):
            host = read_tensor(ctx.fd(t), t)
            evictor.drop(t.file, t.offset, t.nbytes)
        with ctx.phase("upload"):
            ctx.upload(buf, 0, host)
    with ctx.phase("read"):
        evictor.finish()
    if ctx.evict:
        ctx.note(f"evict ({ctx.evict_source}): DONTNEED after each read, then each file whole")


def reader_opener(ctx: LoadContext) -> Callable[[str], int]:
    """``open_file(path) -> fd`` for a reader thread's own descriptor of a model file (its own
    readahead), refused like :meth:`LoadContext.fd` if the file changed since indexing."""

    def open_file(path: str) -> int:
        return open_checked(ctx.index, path)

    return open_file


def engage_staging(ctx: LoadContext, ring: StagingRing, unit: str = "slots", note: str = "") -> None:
    """The ``pinned_staging`` fact of a closed ring (``note`` after its description) and, where the ring
    was asked for write-combined slots, the ``write_combined`` fact (INERT on a backend without them)."""
    ctx.engage("pinned_staging", len(ring.slots) if ring.locked else 0, len(ring.slots), unit=unit,
               note=ring.describe() + note)
    engage_write_combined(ctx, ring)


def engage_write_combined(ctx: LoadContext, ring: StagingRing) -> None:
    """The ``write_combined`` fact where the ring was asked for write-combined slots (else nothing)."""
    fact = ring.write_combined_fact(ctx.device.info().backend)
    if fact is not None:
        ctx.engage(fact.feature, fact.done, fact.total, unit=fact.unit, note=fact.note)


def files_note(ctx: LoadContext) -> str:
    """``", over 4 files"`` for a model of several files (what an engaged fact adds), else ``""``."""
    return f", over {len(ctx.files)} files" if len(ctx.files) > 1 else ""


def eviction_reason(ctx: LoadContext) -> str:
    """Why a prefetch or zero-copy path stood down: the eviction policy is on (and where it came from)."""
    return f"eviction policy on ({ctx.evict_source})"


def probe_resident(ctx: LoadContext, sampled: bool = False) -> float:
    """Resident fraction of the model's data — every file's data region, weighted by its size —
    probed once per load (prefetch phase).

    Probing per tensor or per layer is the seed's ~17 s mistake: one mincore pass per load is enough.
    ``sampled``: 4096 pages spread over each region instead of every page (mincore costs ~0.1 µs a page:
    ~0.2 s for an 8 GB model, as long as a fast warm load itself) — enough to decide a gate.
    """
    probe = sampled_resident_fraction if sampled else resident_fraction
    with ctx.phase("prefetch"):
        spans = [(f, f.data_end - f.data_start) for f, ts in ctx.by_file() if ts]
        total = sum(n for _, n in spans)
        frac = sum(probe(f.path, f.data_start, n) * n for f, n in spans) / total if total else 1.0
    ctx.count("residency_probes")
    return frac


class FileMapping:
    """A read-only mapping of the whole file kept alive for the load; ``slice`` lends views of it.

    A slice past the mapping's end raises (a memoryview slice would silently come back short). The
    mapping covers the file as it was when mapped: a truncation after that is a SIGBUS on access,
    which no Python code can turn into an error — the worker dies and the run fails with the signal.
    """

    def __init__(self, fd: int, path: str = ""):
        self.map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        self.view = memoryview(self.map)
        self.path = path

    def require(self, end: int) -> None:
        """Raise FormatError unless the mapping reaches byte ``end``."""
        if end > len(self.map):
            raise FormatError(self.path, "size", f"the mapping ends at {len(self.map)}, the index needs {end}: "
                                                 "truncated since it was indexed?")

    def slice(self, offset: int, nbytes: int) -> memoryview:
        self.require(offset + nbytes)
        return self.view[offset : offset + nbytes]

    def close(self) -> None:
        self.view.release()
        self.map.close()  # BufferError if a backend kept a slice alive: a bug worth seeing


def open_mapping(ctx: LoadContext, file: str | ModelFile | TensorInfo | None = None) -> FileMapping:
    """The load's one read-only mapping of a model file (``None``: the only one of a one-file model),
    made on first use and unmapped when the load ends."""
    path = ctx.path_of(file)

    def make() -> FileMapping:
        ctx.once("mapping room", lambda: check_descriptors(ctx.index.path, len(ctx.files)))  # mmap keeps a dup
        fd = open_checked(ctx.index, path)
        try:
            m = FileMapping(fd, path)
        finally:
            os.close(fd)  # the mapping holds its own duplicate: one descriptor per mapped file, not two
        ctx.cleanup(m.close)
        return m

    return ctx.once(("mapping", path), make)


def upload_borrowed(ctx: LoadContext, tensors: tuple[TensorInfo, ...] | None = None) -> None:
    """Upload every tensor straight from a mapping of its file (one per file): no heap copy; page
    faults happen in the copy."""
    for t in ctx.tensors if tensors is None else tensors:
        mapping = open_mapping(ctx, t.file)
        buf = ctx.place(t)
        with ctx.phase("upload"), mapping.slice(t.offset, t.nbytes) as src:
            ctx.upload(buf, 0, src)


class ThreadGuard:
    """Starts worker threads and, on exit — normal or by exception — stops and joins every one.

    ``stop`` is the event workers poll between units of work; the first exception a worker raises is
    kept in ``error`` and re-raised by :meth:`check`. Joins are bounded (:mod:`workbench.upload.joins`):
    a thread still running :data:`~workbench.upload.joins.STOP_GRACE_S` after ``stop`` was set fails the
    load with :class:`~workbench.errors.ThreadsStuck` naming where it is, instead of hanging it.
    """

    def __init__(self, name: str):
        self.name = name
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.error: BaseException | None = None

    def spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=self._run, args=(target, args), daemon=True,
                             name=f"{self.name}-{len(self.threads)}")
        self.threads.append(t)
        t.start()

    def _run(self, target: Callable[..., None], args: tuple) -> None:
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the loading thread
            if self.error is None:
                self.error = exc
            self.stop.set()

    def join(self) -> None:
        """Wait for every worker to finish its work (no stop request); re-raise a worker's error as soon
        as one fails (the others are then stopped, within a bound, on exit)."""
        for t in self.threads:
            while t.is_alive() and self.error is None:
                t.join(0.05)
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def __enter__(self) -> "ThreadGuard":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.stop.set()
        stuck = join_within(self.threads)
        if stuck:
            raise ThreadsStuck(self.name, joins.STOP_GRACE_S, stuck, exc or self.error) from exc
