"""``ring``: parallel readers that copy for themselves, through one small staging ring — the fast path.

Each reader thread takes a window of a model file, preads it into a free slot of a shared
:class:`~workbench.upload.staging.StagingRing`, issues the asynchronous copies of the tensor pieces in
that window itself, and hands the slot back fenced behind them; no thread waits for another to upload.
How the model is cut depends on one residency probe per load (mincore over 4096 pages spread across
each file: probing all 2 M pages of an 8 GB file costs ~0.2 s, as much as the warm load):

- warm (at least ``gate`` resident): ``threads`` readers share one queue of ``slot_mib`` windows in model
  order (file by file) — small pieces keep every reader busy to the end, and the page cache reads at
  memory speed;
- cold: ``cold_threads`` readers each read one contiguous share of the model's bytes front to back in
  ``cold_mib`` preads — the pattern the H200's disk served best, where interleaved small windows lost
  15 %. Shares are cut over the whole set, so one may run from the end of one file into the next.

A model of several files keeps the one reader pool and the one staging ring across its files: a window
never crosses a file (it knows its file), and each reader opens its own descriptor of each file it
reads (its own readahead state), closed when it is done.

Warm, the readers and windows are fitted to the load (``fit``, :func:`~workbench.upload.staging_plan.fit_warm`):
no more readers than usable cores or than the load keeps busy, windows small enough that each reader
gets several; each staging slot is made by the reader that first takes it (``provision=readers``), so
no reader waits for the whole ring. Where the device's memory is host memory (the host backends) the
readers read straight into the tensors' buffers (``direct``): no staging hop, no second memcpy.

Every tensor's device buffer is carved from one device allocation (``arena``; 0.7 ms against 7.6 ms
for 129 separate allocations on the H200). Reader threads' time is summed per activity in counters
(``wait_us``: slot + fence, ``read_us``, ``issue_us``: copy calls, ``release_us``: fence records), since
the loading thread's phases only see the readers' wall (``read``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Sequence

from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param
from workbench.strategies.ring_plan import Piece, Region, Window, model_regions, plan_shares, plan_windows
from workbench.strategies.ring_readers import Readers
from workbench.strategies.toolkit import (
    Evictor, MiB, StagingRing, ThreadGuard, engage_write_combined, files_note, probe_resident, settle_staged,
)
from workbench.upload.base import DeviceBuffer
from workbench.upload.copier import Copier
from workbench.upload.staged_read import SharedQueue
from workbench.upload.staging import MAPPINGS, PROVISIONS, SOURCES, size_ring
from workbench.upload.staging_plan import fit_warm

DIRECT = ("auto", "off")
COPIERS = ("readers", "one")
STARTS = ("each", "together")
__all__ = ["Piece", "Region", "RingParams", "RingStrategy", "Window", "model_regions", "plan_shares", "plan_windows"]


@dataclass(frozen=True)
class RingParams(BaseParams):
    """``threads`` readers and ``slot_mib`` windows when warm; ``cold_threads`` readers with contiguous
    shares read ``cold_mib`` at a time when cold; ``gate``: resident fraction that counts as warm;
    ``spare``: slots beyond one per reader; ``arena``: one device allocation for every tensor;
    ``staging``: where slots come from (auto: mmap + huge pages + register_host, else alloc_pinned);
    ``provision``: ``upfront`` (the whole ring registered before any reader starts), ``background``
    (slots registered one by one while the readers already run), ``readers`` (each slot made by the
    reader that first takes it) or ``first-read`` (as ``readers``, but the slot is only mapped: its first
    pread faults its pages in, then it is registered before its copies); ``mapping`` (first-read with
    staging auto/anon only; nothing otherwise): ``each`` (each reader maps its own slot and makes its
    fence) or ``one`` (one mapping for every slot, and every fence, made with the ring; each reader
    carves its slot from it, ``upload/slab.py``); ``copier``: who makes a staged
    load's device calls — ``readers`` (each reader registers, copies and fences for itself) or ``one`` (one
    issuer and one fence-waiting thread for all readers, ``upload/copier.py``: the readers only read);
    ``start``: ``together`` (all started, then released at once: no reader competes with the loading
    thread starting the others) or ``each`` (a reader works as soon as it is started);
    ``crowd_mib``: beyond 8 warm
    readers, one more only per ``crowd_mib`` of the load (0: off; staged loads only: the queue it avoids
    is the device driver's); ``fit``: warm readers and windows
    sized to the load, the usable cores
    and the available memory (``upload/staging_plan.py``; 0: as asked); ``direct``: ``auto`` reads
    straight into the device's memory where it is host memory (no staging hop), ``off`` always stages."""

    heatmap_axes: ClassVar[tuple[str, str] | None] = ("threads", "slot_mib")
    small_pieces: ClassVar[Mapping[str, Any]] = MappingProxyType(  # staged even where memory is host memory
        {"slot_mib": 1, "cold_mib": 1, "threads": 3, "cold_threads": 2, "direct": "off"})
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (  # the warm path (gate 0), each staging source
        MappingProxyType({**small_pieces, "gate": 0.0}), MappingProxyType({**small_pieces, "staging": "alloc"}),
        MappingProxyType({**small_pieces, "start": "each"}),
        MappingProxyType({**small_pieces, "staging": "anon"}), MappingProxyType({**small_pieces, "arena": False}),
        MappingProxyType({**small_pieces, "provision": "background"}),
        MappingProxyType({**small_pieces, "provision": "background", "staging": "alloc"}),
        MappingProxyType({**small_pieces, "staging": "wc"}),
        MappingProxyType({**small_pieces, "provision": "background", "staging": "wc"}),
        MappingProxyType({**small_pieces, "provision": "readers"}),
        MappingProxyType({**small_pieces, "provision": "readers", "staging": "alloc", "fit": False}),
        MappingProxyType({**small_pieces, "provision": "first-read"}),
        MappingProxyType({**small_pieces, "provision": "first-read", "staging": "anon"}),
        MappingProxyType({**small_pieces, "provision": "first-read", "mapping": "each"}),
        MappingProxyType({**small_pieces, "provision": "first-read", "mapping": "each", "staging": "anon"}),
        MappingProxyType({**small_pieces, "provision": "first-read", "copier": "one"}),
        MappingProxyType({**small_pieces, "provision": "upfront", "staging": "alloc", "copier": "one"}))

    threads: int = 16
    cold_threads: int = 8
    # 8 MiB, measured: on the H200 (2026-12-01, 8.21 GB bf16 file, n=5, warm) 16 readers with 4 MiB
    # windows spent 83 ms per reader issuing copies (twice the copies, each queued behind the others on
    # the driver's lock) and loaded in 354 ms; with 8 MiB windows 5 ms and 205 ms (40.0 GB/s).
    slot_mib: int = 8
    cold_mib: int = 16
    spare: int = 4
    gate: float = 0.9
    arena: bool = True
    staging: str = "auto"
    # first-read, measured on the H200 (2026-12-03 13:57, bf16 safetensors, warm, n=6 interleaved, all
    # verified; docs/benchmarks/sizes-h200.md): against slots made (populated + registered) by their
    # readers 1.22x at 1 GiB (readers 0.82x [0.79-0.89]), 1.17x at 2 GiB (0.85x [0.74-0.92]), 1.05x at
    # 16 GB (0.95x [0.87-0.97], n=3), level at 64 MiB-256 MiB and the MoE GGUF.
    provision: str = "first-read"
    # mapping=one, measured on the H200 (2026-12-03 18:42, warm, n=6 interleaved, all verified; sizes-h200.md
    # "Fourth pass"): against each 1.06x [1.00-1.17] at 256 MiB, 1.02x [0.90-1.07] at 1 GiB, 1.01x [0.97-1.13]
    # at 2 GiB, 1.02x [0.94-1.04] on the MoE GGUF, 1.01x [0.97-1.02] at 16 GB; the readers' slot-making
    # summed 16.4 -> 7.9 ms at 256 MiB, 53.4 -> 21.2 ms at 2 GiB (only the registering is left to them).
    mapping: str = "one"
    fit: bool = True
    min_share_mib: int = 16
    # crowd: on the H200 (2026-12-03 14:20, n=6) 8 readers against 16: 1.56x [1.26-1.88] at 256 MiB,
    # 1.13x [1.03-1.39] at 1 GiB, 1.02x [0.87-1.19] at 2 GiB (each reader's registration, copies and
    # fences queue on the driver's lock: their summed time fell 5x at 256 MiB with half the readers).
    crowd_mib: int = 128
    direct: str = "auto"
    # copier=one, measured on the H200 (2026-12-03 16:48, warm, n=6 interleaved, n=3 at 16 GB, all verified;
    # docs/benchmarks/sizes-h200.md "Third pass"): 0.86x [0.78-0.93] at 256 MiB, 0.86x [0.82-0.96] at 1 GiB,
    # 0.87x [0.83-0.91] at 2 GiB, 0.89x [0.73-0.92] on the MoE GGUF, 0.91x [0.70-0.99] at 16 GB: slower,
    # so the readers keep their own device calls; kept to reproduce the measurement.
    copier: str = "readers"
    # start: together (every reader started first, then all released at once) or each (a reader works as
    # soon as the loading thread has started it, beside the next ones' starts: the loading thread then
    # queues for the GIL behind the readers at work, and the first reader's start to the last's took 8.5 ms
    # for 8 readers and 26 ms for 15). Measured on the H200 (2026-12-03 22:37, warm, n=10 interleaved, all
    # verified; docs/benchmarks/sizes-h200.md "Fifth pass"), together / each: 1.07x [0.91-1.16] at 256 MiB,
    # 1.03x [0.96-1.12] at 1 GiB, 1.15x [1.05-1.27] at 2 GiB, 1.08x [1.00-1.15] on the MoE GGUF.
    start: str = "together"

    def __post_init__(self) -> None:
        for name in ("threads", "cold_threads", "slot_mib", "cold_mib"):
            value = getattr(self, name)
            check_param("ring", name, value >= 1, f"must be >= 1, got {value}")
        check_param("ring", "spare", self.spare >= 0, f"must be >= 0, got {self.spare}")
        check_param("ring", "gate", 0.0 <= self.gate <= 1.0, f"must be in [0, 1], got {self.gate}")
        check_param("ring", "staging", self.staging in SOURCES, f"one of {', '.join(SOURCES)}, got {self.staging!r}")
        check_param("ring", "provision", self.provision in PROVISIONS,
                    f"one of {', '.join(PROVISIONS)}, got {self.provision!r}")
        check_param("ring", "mapping", self.mapping in MAPPINGS, f"one of {', '.join(MAPPINGS)}, got {self.mapping!r}")
        check_param("ring", "min_share_mib", self.min_share_mib >= 1, f"must be >= 1, got {self.min_share_mib}")
        check_param("ring", "crowd_mib", self.crowd_mib >= 0, f"must be >= 0 (0: off), got {self.crowd_mib}")
        check_param("ring", "direct", self.direct in DIRECT, f"one of {', '.join(DIRECT)}, got {self.direct!r}")
        check_param("ring", "copier", self.copier in COPIERS, f"one of {', '.join(COPIERS)}, got {self.copier!r}")
        check_param("ring", "start", self.start in STARTS, f"one of {', '.join(STARTS)}, got {self.start!r}")


class RingStrategy(Strategy):
    name: ClassVar[str] = "ring"
    summary: ClassVar[str] = ("parallel readers pread windows into one small pinned staging ring and issue "
                              "their own async copies (warm: shared small windows; cold: a contiguous share "
                              "each, large reads; one mincore probe decides)")
    Params: ClassVar[type] = RingParams

    def _load(self, ctx: LoadContext) -> None:
        p = self.params
        evictor = Evictor(ctx)
        resident = probe_resident(ctx, sampled=True)
        warm = resident >= p.gate
        t0 = time.perf_counter_ns()
        bufs = ctx.place_all() if p.arena else [ctx.place(t) for t in ctx.tensors]
        ctx.count("alloc_us", (time.perf_counter_ns() - t0) // 1000)
        direct = p.direct == "auto" and bool(bufs) and ctx.device.host_view(bufs[0]) is not None
        regions, files = model_regions(ctx), files_note(ctx)
        total = sum(r.hi - r.lo for r in regions)
        if warm:
            fit = fit_warm(total, p.threads, p.slot_mib * MiB, spare=0 if direct else p.spare,
                           min_share=p.min_share_mib * MiB,
                           crowd=0 if direct else p.crowd_mib * MiB) if p.fit else None  # the driver's queue
            size = fit.window if fit else p.slot_mib * MiB
            windows = [w for r in regions for w in plan_windows(r, size)]  # one queue, model order
            readers, sources = min(fit.readers if fit else p.threads, len(windows)), None
        else:
            fit, size = None, p.cold_mib * MiB
            shares = plan_shares(regions, p.cold_threads, size)
            windows = [w for share in shares for w in share]
            readers, sources = len(shares), shares
        plan = (f"warm: {resident:.0%} resident >= {p.gate:.0%}, {len(windows)} windows of {size / MiB:g} MiB "
                f"shared{files}" if warm else f"cold: {resident:.0%} resident < {p.gate:.0%}, a contiguous share "
                f"per reader in {p.cold_mib} MiB reads{files}")
        if fit and fit.why:
            plan += f"; fitted to the load: {fit.why}"
        if not windows:
            ctx.engage("ring_readers", 0, 0, unit="threads", note="nothing to read")
            return
        sources = sources or [SharedQueue(windows)] * readers
        if direct:
            self._read_direct(ctx, sources, bufs, evictor)
        else:
            self._run_readers(ctx, readers, size, sources, bufs, evictor)
        ctx.set_path(readers=readers, copy_from="none" if direct else "pinned")
        ctx.engage("ring_readers", readers, p.threads if warm else p.cold_threads, unit="threads", note=plan)
        if p.arena:
            ctx.engage("one_allocation", 1, 1, unit="allocations",
                       note=f"{len(bufs)} tensors carved from one device allocation{files}")

    def _read_direct(self, ctx: LoadContext, sources: Sequence[Any], bufs: Sequence[DeviceBuffer],
                     evictor: Evictor) -> None:
        """The device's memory is host memory: every piece read straight into its buffer."""
        readers = Readers(ctx, None, bufs, evictor, together=self.params.start == "together")
        self._spawn(ctx, readers, sources)
        with ctx.phase("read"):
            evictor.finish()
        ctx.engage("direct_to_device", len(bufs), len(bufs), unit="tensors",
                   note=f"{ctx.device.info().backend}: the device's memory is host memory, read straight into "
                        f"it: no staging hop{files_note(ctx)}")
        if self.params.staging == "wc":  # asked for, and nothing to apply it to: said, not dropped
            ctx.engage("write_combined", 0, 1, unit="rings", note="no staging ring: read straight into host memory")

    def _spawn(self, ctx: LoadContext, readers: Readers, sources: Sequence[Any]) -> None:
        copier = readers.copier
        with ThreadGuard("ring") as guard, ctx.phase("read"):  # readers start working as they spawn
            t0 = time.perf_counter_ns()
            if copier is not None:
                copier.start(guard.stop)  # a copier's failure stops the readers
            try:
                for source in sources:
                    guard.spawn(readers.run, source, guard.stop)
            finally:
                readers.go.set()  # start=together: every reader released at once (also when a spawn failed)
            guard.join()
            if copier is not None:
                copier.finish()  # every copy issued and done; the copier's error is raised here
        first = readers.first_read_ns
        ctx.count("first_read_us", max(0, (first or t0) - t0) // 1000)  # reader start (+ its first slot)
        if readers.ends:
            ctx.count("end_spread_us", (max(readers.ends) - min(readers.ends)) // 1000)  # the window waits for the last
            ctx.count("start_spread_us", (max(readers.births) - min(readers.births)) // 1000)  # started one by one

    def _run_readers(self, ctx: LoadContext, readers: int, slot: int, sources: Sequence[Any],
                     bufs: Sequence[DeviceBuffer], evictor: Evictor) -> None:
        with ctx.phase("staging"):
            t0 = time.perf_counter_ns()
            sizes = [w.hi - w.lo for source in {id(s): s for s in sources}.values() for w in _windows_of(source)]
            slots, slot = size_ring(readers + self.params.spare, slot, sizes)  # no more than the load reads
            ring = StagingRing(ctx.device, slots, slot, source=self.params.staging,
                               provision=self.params.provision, mapping=self.params.mapping)
            ctx.count("provision_us", (time.perf_counter_ns() - t0) // 1000)
        ctx.cleanup(ring.close, False)  # error path only: closed below otherwise
        copier = Copier(ctx.device, ring, name="ring-copier") if self.params.copier == "one" else None
        if copier is not None:
            ctx.cleanup(copier.close)  # joined before the ring closes (the last cleanup runs first)
        self._spawn(ctx, Readers(ctx, ring, bufs, evictor, copier, self.params.start == "together"), sources)
        t1 = time.perf_counter_ns()
        settle_staged(ctx, ring, evictor)
        ctx.count("reader_provision_us", int(ring.reader_provision_s * 1e6))
        ctx.count("register_us", int(ring.register_s * 1e6))  # first-read: the registering part of it
        ctx.count("unstage_us", int(ring.release_s * 1e6))
        ctx.count("settle_us", (time.perf_counter_ns() - t1) // 1000)
        if copier is not None:
            for key, value in copier.counters().items():
                ctx.count(key, value)
            ctx.engage("one_copier", 1, 1, unit="copiers",
                       note=f"one thread issued the {copier.copies} copies of {copier.windows} windows and one "
                            f"waited their fences; the {readers} readers only read")
        ctx.engage("pinned_staging", len(ring.slots) if ring.locked else 0, len(ring.slots),
                   unit="slots", note=ring.describe() + files_note(ctx))
        engage_write_combined(ctx, ring)


def _windows_of(source: Any) -> list[Window]:
    """The windows a reader's source holds (a shared queue, or one reader's share)."""
    return source.windows if isinstance(source, SharedQueue) else list(source)
