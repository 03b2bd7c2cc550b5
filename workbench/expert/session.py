"""A long-lived decode session: turns × tokens of routed experts through the expert cache, lanes, the
device and (optionally) compute, recorded per turn.

Why: a single-shot load in a fresh process cannot see what builds up over time — the second
write-up's boundary-page leak was invisible in 24-40-token runs and cost 40 MiB a turn in the app's
long session — and its claim (+20 % tok/s in place vs bounce, the compute residual 0.180 → 0.143
s/token) was measured on a decode loop with 4 reader lanes, overlap and a 2000 MiB cache. The loop
itself is :mod:`workbench.expert.decode`; what a turn records, :mod:`workbench.expert.session_records`.

Library use (the CLI and the ledger build on it)::

    with ExpertSession(index, device, SessionConfig(turns=20, tokens=64, lanes=4, overlap=True)) as s:
        print(s.facts.placement_report, s.facts.warnings)
        for record in s.turns():
            ...
        report = s.report()          # SessionReport; report.to_json() is `session --json`
"""
from __future__ import annotations

import contextlib
import resource
import time
from typing import Callable, Iterator

from workbench.errors import ParamError
from workbench.expert.cache import ExpertCache
from workbench.expert.compute import open_compute
from workbench.expert.decode import Decoder, SliceUploader, Timers, arena_slots
from workbench.expert.eager import land_eager
from workbench.expert.uploader import open_uploader
from workbench.expert.lanes import LanePool, switch_interval
from workbench.expert.memory import process_memory
from workbench.expert.miss.batch import BatchedMisses
from workbench.expert.miss.server import open_miss
from workbench.expert.prefetch import PrefetchStage, make_predictor, parse_prefetch
from workbench.expert.policies.partition import session_eviction
from workbench.expert.pressure_turn import TurnPressure
from workbench.expert.procstat import CgroupMemory, read_io, read_status
from workbench.expert.session_check import SessionChecker
from workbench.expert.session_config import SessionConfig, check_config, routing
from workbench.expert.session_defaults import (
    default_cache_bytes,
    layer_bytes,
    session_warnings,
    working_set_bytes,
)
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import SessionReport, summarize
from workbench.formats.index import TensorIndex
from workbench.upload.base import Device

MemoryProbe = Callable[[], CgroupMemory]


class ExpertSession:
    """One session over ``index`` on ``device``; :meth:`turns` runs ``config.turns`` turns.

    ``memory_probe`` reads the memory cgroup the process runs in (``--memory-limit``); ``uploader``
    replaces the pageable copies (:class:`~workbench.expert.decode.SliceUploader`).
    """

    def __init__(self, index: TensorIndex, device: Device, config: SessionConfig, *,
                 memory_probe: MemoryProbe | None = None, uploader: SliceUploader | None = None):
        check_config(config)
        self.index, self.device, self.config = index, device, config
        self.trace, trace_note = routing(index, config)
        blobs = index.blobs
        self._by_layer = {layer: [i for i, b in enumerate(blobs) if b.layer == layer] for layer in self.trace.layers}
        layer_blobs = {layer: [blobs[i] for i in ids] for layer, ids in self._by_layer.items()}
        k = self.trace.k
        working = working_set_bytes(layer_blobs, k)
        expert_bytes = sum(b.nbytes for b in blobs)
        policy, per_layer = session_eviction(blobs, self.trace, config.policy, config.cache_experts,
                                             config.turns * config.tokens)
        budget = per_layer or config.cache_bytes or default_cache_bytes(expert_bytes, working)
        self._stack = contextlib.ExitStack()
        try:
            self._stack.enter_context(switch_interval(config.switch_interval_us))  # put back last
            self.cache = self._stack.enter_context(ExpertCache(
                index.path, blobs, budget_bytes=budget, placement=config.placement,
                boundary_release=config.boundary_release, release_advice=config.release_advice,
                reader=config.reader, policy=policy,
                gate=config.gate, gate_scope=config.gate_scope))
            locked = self._lock_pool(device)
            arena_bytes = max(arena_slots([max(n for _, n in b.slices) for _ in range(k) for b in bs])[1]
                              for bs in layer_blobs.values())
            batch = BatchedMisses(arena_bytes, device, config.lanes, locked) if config.batch_misses else None
            if batch is not None:
                self._stack.callback(batch.close)  # after the last layer landed: its slots' fences
            self._arena = device.alloc(arena_bytes * (batch.halves if batch else 1))  # batched: two layers at once
            self._stack.callback(device.free, self._arena)
            inline = config.lanes == 1 and not config.overlap
            self.lanes = self._stack.enter_context(LanePool(config.lanes, inline=inline, handoff=config.lane_handoff))
            tensors = {t.name: t for t in index.tensors}
            self.compute = open_compute(config.compute, device, blobs, tensors, len(self.trace.layers))
            self._stack.callback(self.compute.close)
            self.miss = open_miss(config.miss, self.cache, index.path, blobs, tensors, self._by_layer,
                                  self.trace.layers)
            if self.miss.host is not None:
                self._stack.callback(self.miss.host.close)
            self.checker = self._stack.enter_context(SessionChecker(index, device, self.cache, self._arena))
            if uploader is None:
                uploader = open_uploader(config.uploader, device, config.upload_threads, locked)
                self._stack.callback(uploader.close)  # after the last drain: the stack closes in reverse
        except BaseException:
            self._stack.close()
            raise
        self.uploader = uploader
        spec = parse_prefetch(config.prefetch)  # a predictor stages ahead only with overlap (check_config)
        self.prefetch = PrefetchStage(make_predictor(spec, self.trace, config.seed)) \
            if config.overlap and spec.predicts else None
        self.decoder = Decoder(self.cache, self.lanes, uploader, self._arena,
                               self.compute, self.trace, self._by_layer, config.overlap,
                               self.checker.check_upload if config.verify else None, self.prefetch, self.miss,
                               batch, land_eager if config.schedule == "eager" else None)
        self._probe = memory_probe
        self._pressure = TurnPressure([f.path for f in index.files]) if config.memory_limit_mib else None
        self._cg_before = memory_probe() if memory_probe else None
        self._records: list[TurnRecord] = []
        self._next_token = 0
        layer_set = max(layer_bytes(b, k) for b in layer_blobs.values())
        self.facts = self._facts(trace_note, working, expert_bytes, layer_set)

    def _lock_pool(self, device: Device) -> bool:
        """Page-lock the cache's pool with the device (``placement="pool"``; unlocked when the session closes):
        True once locked, False for any other placement; one ParamError line where the device refuses."""
        pool = self.cache.pool
        if pool is None:
            return False
        handle = device.register_host(pool.mapping.view)
        if handle is None:
            raise ParamError("session", "placement", f"pool: {device.info().name} refused to page-lock its "
                             f"{pool.nbytes / 2**20:,.1f} MiB (the locked-memory limit: `ulimit -l`, RLIMIT_MEMLOCK)")
        self._stack.callback(device.unregister_host, handle)  # before the pool is unmapped: the stack unwinds
        return True

    def _facts(self, trace_note: str, working: int, expert_bytes: int, layer_set: int) -> SessionFacts:
        f, c = self.cache.facts, self.config
        warnings = session_warnings(budget=f.budget_bytes, working_set=working, expert_bytes=expert_bytes,
                                    policy=f.policy, leak_bound=f.leak_bound_pages, placement=f.placement)
        if (c.lanes > 1 or c.overlap) and f.budget_bytes < layer_set:
            warnings += (f"the cache cannot hold one layer's routed experts ({layer_set:,} B) at once, which lanes "
                         "and overlap need: the session stops when a layer's reads do not fit",)
        return SessionFacts(
            f.placement, str(f.placement_report), f.placement_report.state, f.reader, f.reader_note,
            f.boundary_release, f.policy, f.budget_bytes, f.reserved_bytes, self.trace.k, self.trace.source,
            trace_note, self.device.info().name, bool(c.verify), self.compute.description, c.lanes, c.overlap,
            _gate_text(self.cache), f.leak_bound_pages, working, expert_bytes, f.files, warnings,
            release_advice=f.release_advice, uploader=c.uploader, upload_threads=c.upload_threads,
            prefetch=self._prefetch_text(), miss=self.miss.describe(), lane_options=", ".join(filter(None, [
                f"schedule {c.schedule}" if c.schedule != "landed" else "",
                f"handoff {c.lane_handoff}" if c.lane_handoff != "executor" else "",
                f"switch interval {c.switch_interval_us} µs" if c.switch_interval_us else ""])))

    def _prefetch_text(self) -> str:
        if self.prefetch is not None:
            return self.prefetch.description
        if not self.config.overlap:
            return "none (no overlap: a layer's misses are read once it is routed)"
        return "route (the next layer's own routing, known ahead: a perfect predictor)"

    def turns(self) -> Iterator[TurnRecord]:
        """Run the configured number of turns, yielding each turn's record as it ends."""
        for _ in range(self.config.turns):
            yield self.run_turn()

    def run_turn(self) -> TurnRecord:
        """One turn of ``config.tokens`` tokens; timed from the first routing to the last copy's end."""
        n = self.config.tokens
        if self._pressure is not None:
            self._pressure.before()  # mincore of the model's files: outside the turn's timing
        before, meter0, io0 = self.cache.counters(), self.lanes.meter.snapshot(), read_io()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self.decoder.timers = timers = Timers()
        if self.prefetch is not None:
            self.prefetch.reset_turn()
        t0 = time.perf_counter()
        self.decoder.run(self._next_token, n)
        self.device.synchronize()
        seconds = time.perf_counter() - t0
        ru1, io1 = resource.getrusage(resource.RUSAGE_SELF), read_io()
        self._next_token += n
        c, mem = self.cache.counters().minus(before), self.cache.memory()
        # entries read ahead for a layer that did not route them were admitted, not looked up: not misses
        misses = c.misses - (self.prefetch.unused_entries if self.prefetch is not None else 0)
        served = self.miss.take_turn()  # misses computed on the host were never looked up: they count here
        misses += served.host_entries  # and hits computed there were never looked up either
        hits = c.hits + served.host_hit_entries
        reads = self.lanes.meter.snapshot().minus(meter0)
        disk = io1.read_bytes - io0.read_bytes
        page_cache = max(0, (io1.rchar - io0.rchar) - disk)
        stalls, book = timers.read + timers.upload + timers.route, timers.bookkeeping
        self.miss.reset()  # nothing planned is left across a turn's end
        status, cg = read_status(), self._cgroup_delta()
        record = TurnRecord(
            turn=len(self._records), tokens=n, bytes_read=c.bytes_read, hits=hits, misses=misses,
            evictions=c.evictions, minflt=ru1.ru_minflt - ru0.ru_minflt, majflt=ru1.ru_majflt - ru0.ru_majflt,
            accounted_bytes=mem.accounted_bytes, actual_anon_bytes=process_memory().anon_bytes,
            unreleased_pages=mem.unreleased_pages, seconds=seconds, tokens_per_s=n / max(seconds, 1e-12),
            hit_rate=hits / max(1, hits + misses), compute_s=timers.compute, stall_read_s=timers.read,
            stall_upload_s=timers.upload, stall_route_s=timers.route, bookkeeping_s=book,
            other_s=max(0.0, seconds - timers.compute - timers.host_compute - stalls - book),
            residual_s_per_token=max(0.0, seconds - stalls - book) / n,
            hit_bytes_per_token=c.hit_bytes / n, page_cache_bytes_per_token=page_cache / n,
            disk_bytes_per_token=disk / n, io_bytes=c.io_bytes, landed_bytes=timers.landed_bytes,
            read_busy_s=reads.busy_s, read_queue_depth=reads.depth,
            staged_gbps=c.bytes_read / reads.busy_s / 1e9 if reads.busy_s > 0 else 0.0,
            rss_bytes=status.rss_bytes, swap_bytes=status.swap_bytes, cg_usage_bytes=cg.usage_bytes,
            cg_pgmajfault=cg.pgmajfault, cg_refaults=cg.refaults, cg_reclaimed=cg.reclaimed,
            cg_limit_hits=cg.limit_hits, cg_swap_bytes=cg.swap_bytes, swap_in=cg.swap_in, swap_out=cg.swap_out,
            cg_lazyfreed=cg.lazyfreed,
            shift_copy_bytes=c.shift_copy_bytes, shift_copy_s=c.shift_copy_s, resident_bytes=mem.resident_bytes,
            gated_reads=c.gated_reads, lazyfree_bytes=mem.lazyfree_bytes, file_rss_bytes=status.file_bytes,
            cpu_user_s=ru1.ru_utime - ru0.ru_utime, cpu_sys_s=ru1.ru_stime - ru0.ru_stime,
            recycled_pages=c.recycled_pages,
            token_s=tuple(timers.token_s), token_stall_s=tuple(timers.token_stall_s),
            **(self.prefetch.tally.to_json() if self.prefetch is not None else {}), **served.to_json(),
            **(self._pressure.after(disk) if self._pressure is not None else {}))
        self._records.append(record)
        if self.config.verify_end:  # outside the turn's timing
            self.checker.check_landed(self.decoder.last_landed, self._arena)
        return record

    def _cgroup_delta(self) -> CgroupMemory:
        if self._probe is None or self._cg_before is None:
            return CgroupMemory()
        now = self._probe()
        delta, self._cg_before = now.minus(self._cg_before), now
        return delta

    @property
    def verified_slices(self) -> int:
        return self.checker.verified

    def finish_checks(self) -> None:
        """With ``verify_end``: every live cache entry against the file (after the last turn)."""
        if self.config.verify_end:
            self.checker.check_cache()

    def report(self) -> SessionReport:
        """The turns run so far and their summary."""
        c = self.config
        return SessionReport(tuple(self._records), summarize(self._records, self.facts, self.verified_slices,
                                                             window=c.steady_window, slope_pct=c.steady_slope_pct))

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "ExpertSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gate_text(cache: ExpertCache) -> str:
    if cache.gate is None:
        return "off"
    if cache.gate_scope == "file":
        return f"{cache.gate:g} per file (once, at the start: {'resident' if cache.file_gate_resident else 'below'})"
    return f"{cache.gate:g} per blob (at every miss)"


def run_session(index: TensorIndex, device: Device, *, turns: int, tokens: int, cache_mib: float | None = None,
                **options: object) -> Iterator[TurnRecord]:
    """Yield one :class:`TurnRecord` per turn of a session (options: the :class:`SessionConfig` fields)."""
    config = SessionConfig(turns=turns, tokens=tokens, cache_mib=cache_mib, **options)  # type: ignore[arg-type]
    with ExpertSession(index, device, config) as session:
        yield from session.turns()


__all__ = ["ExpertSession", "SessionConfig", "check_config", "run_session"]
