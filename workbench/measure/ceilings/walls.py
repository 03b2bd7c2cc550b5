"""This machine's bandwidth walls, measured on a scratch file: what no load strategy can beat.

cold read (buffered after eviction, and O_DIRECT) and page-cache read at 1..N threads, memcpy, and per
device backend host→device from pageable, pinned and registered memory. Stored per host in the ledger;
the runner reports every attempt's GB/s as a fraction of the wall that bounds it.

Given the model ``file`` too, the same reads of that whole model — every file of a set (a directory, an
index file or any shard), so a sharded cold read is N files read — as ``cold_read_file_<N>t`` and
``page_cache_read_file_<N>t``: on the H200's virtio disk a 2 GiB region read 15 % faster than the
whole 8 GB file in the same run, so a load of the model is held against a read of the model.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.errors import CacheStateError, WorkbenchError
from workbench.measure.ceilings.bounds import backend_of as _backend
from workbench.measure.ceilings.reads import CHUNK, read_all as _read_all, read_files as _read_files
from workbench.measure.ceilings.results import Ceiling, CeilingsReport
from workbench.measure.lock.scratch import make_scratch
from workbench.records import MiB

if TYPE_CHECKING:
    from workbench.measure.run.runner import LedgerArg
    from workbench.upload.base import Device, DeviceBuffer

FILE_CHUNK = 16 * MiB  # whole-file reads: the read size the H200's disk served best
COPY_MAX = 256 * MiB  # memcpy / host→device size cap: the rate is flat long before this
REPEATS = 3


def thread_counts(limit: int | None = None) -> list[int]:
    """1, 2, 4, 8, … up to ``limit`` (default: the usable cores, at most 16)."""
    cores = limit or min(16, len(os.sched_getaffinity(0)))
    counts, t = [], 1
    while t <= max(1, cores):
        counts.append(t)
        t *= 2
    return counts


def measure_ceilings(directory: str | os.PathLike[str] | None = None, *,
                     devices: Sequence[str] = ("host",), size: int = 512 * MiB,
                     threads: Sequence[int] | None = None, ledger: LedgerArg = None, record: bool = True,
                     progress: Callable[[str], None] | None = None,
                     lock_dir: str | os.PathLike[str] | None = None,
                     file: str | os.PathLike[str] | None = None,
                     file_threads: Sequence[int] | None = None) -> CeilingsReport:
    """Measure the walls on a ``size``-byte scratch file in ``directory`` (deleted afterwards).

    Parameters
    ----------
    directory
        Where the scratch file goes: the file system your models live on (default: cwd).
    devices
        Device specs whose host→device paths to measure (``host``, ``cuda:0`` …).
    ledger
        A ``Ledger``, a path, or None for the default; ``record=False`` keeps the ledger untouched.
    lock_dir
        The device locks (held for ``devices`` throughout, so no sweep is timed meanwhile).
    file, file_threads
        A model (a file, or a directory / index file / shard of a set) to read whole, cold and warm,
        with each of ``file_threads`` readers (default: the largest of ``threads``); it is left resident.
    """
    from workbench.measure.lock.device import DeviceLock, lock_name

    with contextlib.ExitStack() as held:
        # One lock per distinct device, taken in name order so two callers cannot deadlock.
        for spec in sorted({lock_name(d): d for d in devices}.items()):
            held.enter_context(DeviceLock(spec[1], lock_dir))
        report = _measure(directory, devices, size, threads, progress)
        if file is not None:
            report = _with_file_reads(report, os.fspath(file), file_threads, threads, progress)
    if record:
        _record(report, ledger)
    return report


def _measure(directory: str | os.PathLike[str] | None, devices: Sequence[str], size: int,
             threads: Sequence[int] | None, progress: Callable[[str], None] | None) -> CeilingsReport:
    from workbench.settings.defaults import host_id

    directory = os.path.abspath(directory or os.getcwd())
    size = max(CHUNK, size - size % CHUNK)
    counts = list(threads or thread_counts())
    say = progress or (lambda _msg: None)
    found: list[Ceiling] = []
    skipped: list[tuple[str, str]] = []
    path = _write_scratch(directory, size)
    try:
        say("cold reads")
        _cold_reads(path, size, counts, found, skipped)
        say("page-cache reads")
        _warm_reads(path, size, counts, found, skipped)
    finally:
        os.unlink(path)
    say("memcpy")
    found.append(_memcpy(min(size, COPY_MAX)))
    for spec in devices:
        say(f"host→device ({spec})")
        _h2d(spec, min(size, COPY_MAX), found, skipped)
    return CeilingsReport(host_id(), directory, size, tuple(found), tuple(skipped))


def _with_file_reads(report: CeilingsReport, path: str, file_threads: Sequence[int] | None,
                     threads: Sequence[int] | None, progress: Callable[[str], None] | None) -> CeilingsReport:
    """The walls of reading the whole model — every file of a set, the threads sharing its bytes laid
    end to end — cold (every file evicted and checked) and from the page cache (every file resident)."""
    import dataclasses

    from workbench.io.modelcache import model_files, prepare_model

    model = model_files(path, any_file=True)  # a file the workbench cannot index is still read whole
    files = list(zip(model.paths, model.sizes))[: model.n_data_files]
    size, n = model.data_bytes, len(files)
    counts = list(file_threads or [max(threads or thread_counts())])
    found, skipped = list(report.ceilings), list(report.skipped)
    what = os.path.basename(path) + (f" ({n} files)" if n > 1 else "")
    (progress or (lambda _msg: None))(f"whole-model reads of {what}")
    detail = {"file": path, "model": model.path, "files": n, "chunk": FILE_CHUNK}
    for t in counts:
        try:
            prepare_model(model, "cold")
        except CacheStateError as exc:
            skipped.append((f"cold_read_file_{t}t", str(exc)))
            continue
        found.append(_ceiling(f"cold_read_file_{t}t", size, _read_files(files, t, False, FILE_CHUNK), threads=t,
                              mode="buffered pread of the whole model after fadvise(DONTNEED)", **detail))
    try:
        prepare_model(model, "warm")
    except CacheStateError as exc:
        return dataclasses.replace(report, ceilings=tuple(found),
                                   skipped=tuple(skipped + [("page_cache_read_file", str(exc))]))
    for t in counts:
        best = min(_read_files(files, t, False, FILE_CHUNK) for _ in range(2))
        found.append(_ceiling(f"page_cache_read_file_{t}t", size, best, threads=t, repeats=2,
                              mode="pread of the whole resident model", **detail))
    return dataclasses.replace(report, ceilings=tuple(found), skipped=tuple(skipped))


def _record(report: CeilingsReport, ledger: LedgerArg) -> None:
    from workbench.measure.run.runner import open_ledger

    from workbench.io.machine import load_path_settings

    store = open_ledger(ledger)
    settings = load_path_settings(report.directory)  # an attempt held against a wall compares them
    try:
        for c in report.ceilings:
            store.record_ceiling(c.name, c.gbps, {**c.detail, "directory": report.directory,
                                                  "size": report.size, "settings": settings}, host=report.host)
    finally:
        if store is not ledger:  # opened here, so closed here
            store.close()


def _write_scratch(directory: str, size: int) -> str:
    import numpy as np

    block = np.random.default_rng(0).integers(0, 256, size=8 * MiB, dtype=np.uint8).tobytes()
    try:
        fd, path = make_scratch(directory, "ceilings")  # the next run removes one a killed run left
    except OSError as exc:
        raise WorkbenchError(f"{directory}: cannot create the ceilings scratch file: {exc.strerror}") from None
    try:
        for done in range(0, size, len(block)):
            os.write(fd, block[: min(len(block), size - done)])
        os.fsync(fd)  # dirty pages cannot be evicted: the cold reads need them on disk
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise WorkbenchError(f"{path}: cannot write the ceilings scratch file: {exc.strerror}") from None
    os.close(fd)
    return path


def _cold_reads(path: str, size: int, counts: Sequence[int], found: list[Ceiling],
                skipped: list[tuple[str, str]]) -> None:
    from workbench.io.direct import direct_io_support
    from workbench.io.pagecache import prepare

    direct = direct_io_support(path)
    for t in counts:
        try:
            prepare(path, "cold")
        except CacheStateError as exc:
            skipped.append(("cold_read", str(exc)))
            return
        found.append(_ceiling(f"cold_read_buffered_{t}t", size, _read_all(path, size, t, False),
                              threads=t, mode="buffered pread after fadvise(DONTNEED)"))
        if not direct:
            skipped.append((f"cold_read_direct_{t}t", direct.reason))
            continue
        prepare(path, "cold")  # O_DIRECT bypasses the cache, but a resident page would still be flushed
        found.append(_ceiling(f"cold_read_direct_{t}t", size, _read_all(path, size, t, True),
                              threads=t, mode="O_DIRECT pread"))


def _warm_reads(path: str, size: int, counts: Sequence[int], found: list[Ceiling],
                skipped: list[tuple[str, str]]) -> None:
    from workbench.io.pagecache import prepare

    try:
        prepare(path, "warm")
    except CacheStateError as exc:
        skipped.append(("page_cache_read", str(exc)))
        return
    for t in counts:
        best = min(_read_all(path, size, t, False) for _ in range(2))
        found.append(_ceiling(f"page_cache_read_{t}t", size, best, threads=t,
                              mode="pread from resident pages", repeats=2))


def _memcpy(nbytes: int) -> Ceiling:
    import numpy as np

    src = np.random.default_rng(1).integers(0, 256, size=nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    dst[:] = 0  # fault the destination in before timing
    best = _best(lambda: np.copyto(dst, src))
    return _ceiling("memcpy", nbytes, best, mode="numpy copyto, one thread", repeats=REPEATS)


def _h2d(spec: str, nbytes: int, found: list[Ceiling], skipped: list[tuple[str, str]]) -> None:
    import numpy as np

    from workbench.upload import open_device

    try:
        device = open_device(spec)
    except WorkbenchError as exc:
        skipped.append((f"h2d_{_backend(spec)}", str(exc)))
        return
    with device:
        backend, dst = device.info().backend, device.alloc(nbytes)
        src = np.random.default_rng(2).integers(0, 256, size=nbytes, dtype=np.uint8)
        found.append(_ceiling(f"h2d_{_backend(backend)}_pageable", nbytes,
                              _best(lambda: _copy(device, dst, src, False)), device=spec,
                              mode="copy_h2d from pageable heap memory"))
        pinned = device.alloc_pinned(nbytes)
        try:
            pinned.view[:] = src.data
            found.append(_ceiling(f"h2d_{_backend(backend)}_pinned", nbytes,
                                  _best(lambda: _copy(device, dst, pinned.view, True)),
                                  device=spec, locked=pinned.locked,
                                  mode="async copy_h2d from pinned staging"))
        finally:
            device.free_pinned(pinned)
        handle = device.register_host(memoryview(src))
        try:
            found.append(_ceiling(f"h2d_{_backend(backend)}_registered", nbytes,
                                  _best(lambda: _copy(device, dst, src, True)),
                                  device=spec, locked=handle is not None,
                                  mode="async copy_h2d from host-registered heap memory"))
        finally:
            device.unregister_host(handle)
        device.free(dst)


def _copy(device: Device, dst: DeviceBuffer, src: Any, asynchronous: bool) -> None:
    device.copy_h2d(dst, 0, src, asynchronous=asynchronous)
    device.synchronize()


def _best(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _ceiling(name: str, nbytes: int, seconds: float, **detail: Any) -> Ceiling:
    return Ceiling(name, nbytes / seconds / 1e9, {"bytes": nbytes, "seconds": seconds, **detail})
