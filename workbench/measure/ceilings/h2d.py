"""Host→device micro-benchmarks: the upload paths a load strategy is built from, sizes swept.

Paths: a heap source, an mmap source with warm and with cold page-table entries (page cache warm in
both: the difference is the soft faults), pread-then-copy, the pinned staging pipeline (pread into a
two-slot :class:`~workbench.upload.staging.StagingRing`, asynchronous copies), and registered host
memory where the backend can lock it.
On ``host`` these are memcpy paths; on ``cuda``/``hip`` the real PCIe or fabric paths. Each path ×
size becomes a ledger attempt (the heap copy of that size is its baseline), one run per repeat.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from workbench.errors import WorkbenchError
from workbench.measure.run.effect import DEFAULT_MIN_EFFECT
from workbench.measure.lock.scratch import make_scratch
from workbench.records import MiB, RunConfig, RunRecord

if TYPE_CHECKING:
    from workbench.ledger import Ledger
    from workbench.measure.run.runner import LedgerArg
    from workbench.upload.base import Device, DeviceBuffer
PATHS = ("heap", "mmap_warm_pte", "mmap_cold_pte", "pread_copy", "pinned_staging", "registered")
STAGING_CHUNK = 4 * MiB
FILE_PATHS = {"mmap_warm_pte", "mmap_cold_pte", "pread_copy", "pinned_staging"}
Prepared = tuple[Callable[[], float], str, str]  # (one timed repeat, note, why skipped)


@dataclass(frozen=True)
class H2DResult:
    """One path at one size: the seconds of every repeat, or why it was skipped."""

    path: str
    size: int
    device: str
    seconds: tuple[float, ...] = ()
    verified: bool | None = None
    note: str = ""
    skipped: str = ""

    @property
    def median_s(self) -> float | None:
        return float(np.median(self.seconds)) if self.seconds else None

    @property
    def gbps(self) -> float | None:
        m = self.median_s
        return self.size / m / 1e9 if m else None


def measure_h2d(device: str = "host", sizes: Sequence[int] = (4 * MiB, 32 * MiB),
                paths: Sequence[str] = PATHS, repeats: int = 5, scratch_dir: str | None = None,
                progress: Callable[[str], None] | None = None) -> list[H2DResult]:
    """Measure every path at every size on ``device``; the scratch file is deleted afterwards."""
    from workbench.io.pagecache import prepare
    from workbench.upload import open_device

    unknown = sorted(set(paths) - set(PATHS))
    if unknown or not sizes or repeats < 1:
        raise WorkbenchError(f"h2d: unknown path(s) {unknown} (known: {', '.join(PATHS)}), or no sizes/repeats")
    scratch = _write_scratch(scratch_dir or tempfile.gettempdir(), max(sizes))
    results: list[H2DResult] = []
    try:
        prepare(scratch, "warm")
        with open_device(device) as dev:
            for size in sizes:
                for path in paths:
                    if progress:
                        progress(f"{path} {size // MiB} MiB")
                    try:
                        results.append(_measure_one(dev, device, path, size, repeats, scratch))
                    except (WorkbenchError, OSError, ValueError, BufferError) as exc:
                        # one path failing (a driver refusal, say) is a result, not the end of the bench
                        results.append(H2DResult(path, size, device, skipped=f"failed: {exc}"))
    finally:
        os.unlink(scratch)
    return results


def _write_scratch(directory: str, size: int) -> str:
    fd, path = make_scratch(directory, "h2d")  # the next run removes one a killed run left
    with os.fdopen(fd, "wb") as f:
        f.write(np.random.default_rng(7).integers(0, 256, size=size, dtype=np.uint8).tobytes())
    return path


def _measure_one(dev: Device, spec: str, path: str, size: int, repeats: int, scratch: str) -> H2DResult:
    dst = dev.alloc(size)
    with contextlib.ExitStack() as stack:
        stack.callback(dev.free, dst)
        run, note, skipped = _PATH_FUNCS[path](dev, dst, size, scratch, stack)
        if skipped:
            return H2DResult(path, size, spec, skipped=skipped)
        run()  # discarded warm-up: faults the destination in, so the first repeat is not special
        seconds = tuple(run() for _ in range(repeats))
        with open(scratch, "rb") as f:
            verified = dev.read_back(dst, 0, size) == f.read(size)
        return H2DResult(path, size, spec, seconds, verified, note)


def _timed(fn: Callable[[], Any], dev: Device) -> float:
    t0 = time.perf_counter()
    fn()
    dev.synchronize()
    return time.perf_counter() - t0


def _heap(dev: Device, dst: DeviceBuffer, size: int, scratch: str, stack: contextlib.ExitStack) -> Prepared:
    with open(scratch, "rb") as f:
        src = np.frombuffer(f.read(size), dtype=np.uint8).copy()  # faulted in before timing
    return (lambda: _timed(lambda: dev.copy_h2d(dst, 0, src), dev)), "", ""


def _mmap_warm(dev: Device, dst: DeviceBuffer, size: int, scratch: str, stack: contextlib.ExitStack) -> Prepared:
    with open(scratch, "rb") as f:
        mm = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    view = np.frombuffer(mm, dtype=np.uint8)
    int(view[:: mmap.PAGESIZE].sum())  # touch every page: the page-table entries exist before timing
    return (lambda: _timed(lambda: dev.copy_h2d(dst, 0, view), dev)), "page-table entries populated", ""


def _mmap_cold(dev: Device, dst: DeviceBuffer, size: int, scratch: str, stack: contextlib.ExitStack) -> Prepared:
    def run() -> float:
        with open(scratch, "rb") as f:
            mm = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)  # a fresh mapping: no PTEs yet
        try:
            return _timed(lambda: dev.copy_h2d(dst, 0, memoryview(mm)), dev)
        finally:
            mm.close()
    return run, "fresh mapping per repeat (soft faults inside the copy)", ""


def _pread_copy(dev: Device, dst: DeviceBuffer, size: int, scratch: str, stack: contextlib.ExitStack) -> Prepared:
    buf = np.empty(size, dtype=np.uint8)
    buf[:] = 0

    def once() -> None:
        fd = os.open(scratch, os.O_RDONLY)
        try:
            os.preadv(fd, [buf], 0)
        finally:
            os.close(fd)
        dev.copy_h2d(dst, 0, buf)
    return (lambda: _timed(once, dev)), "pread into a heap buffer, then copy", ""


def _pinned(dev: Device, dst: DeviceBuffer, size: int, scratch: str, stack: contextlib.ExitStack) -> Prepared:
    from workbench.upload.staging import StagingRing

    chunk = min(size, STAGING_CHUNK)
    ring = StagingRing(dev, 2, chunk)  # provisioned once, outside the timed repeats
    stack.callback(ring.close)

    def once() -> None:
        fd = os.open(scratch, os.O_RDONLY)
        try:
            for off in range(0, size, chunk):
                n = min(chunk, size - off)
                with ring.slot() as slot, slot.view[:n] as view:  # waits for the slot's last copy
                    os.preadv(fd, [view], off)
                    dev.copy_h2d(dst, off, view, asynchronous=True)
        finally:
            os.close(fd)
    note = f"staging ring: 2 × {chunk / MiB:g} MiB, {ring.how}" + ("" if ring.locked else " (not page-locked)")
    return (lambda: _timed(once, dev)), note, ""


def _registered(dev: Device, dst: DeviceBuffer, size: int, scratch: str, stack: contextlib.ExitStack) -> Prepared:
    with open(scratch, "rb") as f:
        src = np.frombuffer(f.read(size), dtype=np.uint8).copy()
    handle = dev.register_host(memoryview(src))
    if handle is None:
        return (lambda: 0.0), "", f"{dev.info().backend}: host registration refused (RLIMIT_MEMLOCK?)"
    stack.callback(dev.unregister_host, handle)
    return (lambda: _timed(lambda: dev.copy_h2d(dst, 0, src, asynchronous=True), dev)), "registered", ""


_PATH_FUNCS = {"heap": _heap, "mmap_warm_pte": _mmap_warm, "mmap_cold_pte": _mmap_cold,
               "pread_copy": _pread_copy, "pinned_staging": _pinned, "registered": _registered}


def results_frame(results: Sequence[H2DResult]) -> Any:
    """A DataFrame: path, size, size_mib, device, median_s, min_s, max_s, gbps, verified, note, skipped."""
    import pandas as pd

    rows = [{"path": r.path, "size": r.size, "size_mib": r.size / MiB, "device": r.device,
             "median_s": r.median_s, "min_s": min(r.seconds) if r.seconds else None,
             "max_s": max(r.seconds) if r.seconds else None, "gbps": r.gbps, "verified": r.verified,
             "note": r.note, "skipped": r.skipped} for r in results]
    return pd.DataFrame(rows)


def record_h2d(results: Sequence[H2DResult], ledger: LedgerArg = None, *, campaign: str = "h2d",
               hypothesis: str = "") -> list[str]:
    """Store each measured path × size as an attempt (one run per repeat); returns the attempt ids.

    At each size the heap copy is the baseline, and every other path gets the runner's verdict rule
    against it (README "Measuring honestly"; unpaired: a path's repeats ran back to back, not in
    rounds with the heap's); a skipped path is recorded as failed with its reason.
    """
    from workbench.settings.defaults import host_id
    from workbench.measure.run.environment import collect_environment
    from workbench.measure.run.runner import open_ledger

    store = open_ledger(ledger)
    try:
        return _record(results, store, campaign, hypothesis, collect_environment(directory=tempfile.gettempdir()),
                       host_id())
    finally:
        if store is not ledger:  # opened here, so closed here (one per Run press in a notebook)
            store.close()


def _record(results: Sequence[H2DResult], store: Ledger, campaign: str, hypothesis: str, environment: dict,
            host: str) -> list[str]:
    from workbench.measure.run.attempt import Decision, decide
    from workbench.measure.run.stats import summarize

    ids, bases = [], {}
    for r in sorted(results, key=lambda r: (r.size, r.path != "heap")):
        runs = _run_records(r)
        stats = summarize(runs, r.size)
        base_id, base_runs = bases.get(r.size, (None, None))
        attempt_id = store.start_attempt(
            campaign=campaign, config=_config(r), cache="warm" if r.path in FILE_PATHS else "asis",
            hypothesis=hypothesis, environment=environment, host=host,
            file_identity={"path": "(scratch file, deleted)", "size": r.size})
        for run in runs:
            store.add_run(attempt_id, run)
        if r.path == "heap" and stats.n:
            bases[r.size] = (attempt_id, runs)
            d, base_id = Decision("baseline", 1.0), None
        elif r.skipped or not stats.n:
            d = Decision("failed", reason=r.skipped or "no successful repeat")
        else:
            d = decide(runs, base_runs, is_baseline=False, paired=False, min_effect=DEFAULT_MIN_EFFECT)
        store.finish_attempt(attempt_id, stats, baseline_id=base_id, speedup=d.speedup, verdict=d.verdict,
                             notes=r.skipped or r.note, ci=(d.ci_low, d.ci_high), verdict_reason=d.reason)
        ids.append(attempt_id)
    return ids


def _config(r: H2DResult) -> RunConfig:
    return RunConfig(file="(scratch)", strategy=f"h2d:{r.path}", params={"size": r.size},
                     device=r.device, label=f"{r.path} {r.size / MiB:g} MiB")


def _run_records(r: H2DResult) -> list[RunRecord]:
    cache = "warm" if r.path in FILE_PATHS else "asis"
    if r.skipped:
        return [RunRecord(0, os.getpid(), None, None, r.size, None, cache, False, None, error=r.skipped)]
    return [RunRecord(i, os.getpid(), s, s, r.size, 1.0 if cache == "warm" else None, cache, True,
                      r.verified, phases={"upload": s}) for i, s in enumerate(r.seconds)]
