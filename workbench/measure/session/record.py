"""A session's worker events as one ledger attempt with its turns rows, written as they arrive."""
from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any, Callable

from workbench.expert.memory import PAGE
from workbench.expert.session_config import SessionConfig
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.miss.server import miss_line
from workbench.expert.prefetch.tally import tally_line
from workbench.expert.session_summary import SessionReport, growth_line, steady_line, summarize
from workbench.records.token_tail import tail_line
from workbench.measure.session.wall import NO_WALL, machine_walls, turn_wall
from workbench.records import AttemptStats, RunConfig

if TYPE_CHECKING:
    from workbench.formats.index import TensorIndex
    from workbench.ledger import Ledger


class Recorder:
    """Turns the worker's events into one ledger attempt and its turns rows, as they arrive."""

    def __init__(self, ledger: Ledger, file: str, index: TensorIndex, config: SessionConfig, device: str, campaign: str,
                 hypothesis: str, label: str, on_turn: Callable[[TurnRecord], None] | None,
                 on_start: Callable[[SessionFacts], None] | None = None):
        self.ledger, self.index, self.config, self.device = ledger, index, config, device
        self.file = file  # as given: a file, a shard, an index or a directory
        self.campaign, self.hypothesis, self.label, self.on_turn = campaign, hypothesis, label, on_turn
        self.on_start = on_start
        self.cache, self.resident_before, self.error = "asis", None, None
        self.memory_limit, self.memory_outcome, self.memory_method = "", "", ""
        self.pin_text = ""  # under a balloon: what the worker locked of its own file pages after turn 0
        self.failure = ""  # why the attempt failed, when the runner knows it ("oom-killed after 3 of 8 turns")
        self.resident_files: dict[str, float] = {}
        self.records: list[TurnRecord] = []
        self.facts: SessionFacts | None = None
        self.verified_slices = 0
        self.attempt_id: str | None = None
        self.report: SessionReport | None = None
        self.verdict, self.notes, self._done, self.interrupted = "failed", "", False, False
        self._walls: dict[str, float] | None = None

    @property
    def walls(self) -> dict[str, float]:
        """The read walls recorded for this machine (read once, at the first turn)."""
        if self._walls is None:
            self._walls = machine_walls(self.ledger, self.index.path)
        return self._walls

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self.facts = SessionFacts.from_json(event["facts"])
            device_info = event.get("device_info") or {"backend": self.device}
            if self.attempt_id is None:
                self._start(device_info)
            else:  # opened before the worker started: what the worker reported joins it
                self.ledger.describe_attempt(self.attempt_id, device_info=device_info,
                                             environment={"session": self.facts.to_json()})
            if self.on_start is not None:
                self.on_start(self.facts)
        elif kind == "turn":
            record = TurnRecord.from_json(event["turn"])
            if self.facts is not None:  # its misses' GB/s against the wall they were read against
                record = turn_wall(self.walls, record, self.facts)
            self.records.append(record)
            self.ledger.add_turn(self._start({"backend": self.device}), record.to_json())
            if self.on_turn is not None:
                self.on_turn(record)
        elif kind == "pinned":
            self._pinned(event.get("pin") or {})
        elif kind == "end":
            self.verified_slices = int(event.get("verified_slices", 0))

    def _pinned(self, pin: dict[str, Any]) -> None:
        """The worker locked its own file pages after turn 0 (under a balloon): into the facts and the ledger."""
        from workbench.io.own_pages import PinReport

        report = PinReport.from_json(pin)
        self.pin_text = report.text()
        if self.facts is not None:
            self.facts = dataclasses.replace(
                self.facts, pinned_file_bytes=report.locked_bytes, pinned_resident_bytes=report.resident_bytes,
                pinned_s=report.seconds, pinned_vmlck_bytes=report.vmlck_bytes, pinned_note=report.note)
            if self.attempt_id is not None:
                self.ledger.describe_attempt(self.attempt_id, environment={"session": self.facts.to_json()})

    def open(self) -> None:
        """Record the attempt (running) before the worker starts."""
        self._start({"backend": self.device})

    def _start(self, device_info: dict[str, Any]) -> str:
        if self.attempt_id is None:
            from workbench.measure.run.environment import collect_environment
            from workbench.measure.run.model import identity_members, model_directory, recorded_identity, resolve_model

            params = {k: v for k, v in dataclasses.asdict(self.config).items() if v is not None}
            model = resolve_model(self.file)
            ident = recorded_identity(model)  # a set's: over every member and its index file
            env = {**collect_environment(model_directory(model)), "device": device_info,
                   "session": self.facts.to_json() if self.facts is not None else {},
                   "resident_before": {"model": self.resident_before, "files": self.resident_files}}
            if ident.get("hash"):  # each file: its logical name and the path read
                env["model_files"] = identity_members(ident)
            self.attempt_id = self.ledger.start_attempt(
                campaign=self.campaign, config=RunConfig(self.file, "session", params, self.device),
                cache=self.cache, hypothesis=self.hypothesis, label=self.label, file_identity=ident,
                environment=env, device_info=device_info, kind="session")
        return self.attempt_id

    def finish(self, wall: tuple[str, float] | None) -> None:
        """Close the attempt once (after the worker ended, or stopped without its end event)."""
        if self._done:
            return
        self._done = True
        attempt_id = self._start({"backend": self.device})
        facts = self.facts
        if facts is not None and self.memory_limit:
            facts = self.facts = dataclasses.replace(facts, memory_limit=self.memory_limit)
        if self.records and facts is not None:
            c = self.config
            self.report = SessionReport(tuple(self.records), summarize(
                self.records, facts, self.verified_slices, wall=wall, window=c.steady_window,
                slope_pct=c.steady_slope_pct))
        ended = self.report is not None and self.error is None and len(self.records) == self.config.turns
        self.verdict = "baseline" if ended else "failed"

        memory = f"memory limit: {self.memory_limit} — {self.memory_outcome}" if self.memory_limit else ""
        warnings = "; ".join(facts.warnings) if facts is not None else ""
        self.notes = "; ".join(filter(None, [self.error or ("" if ended else "the session did not finish"), memory,
                                             summary_line(self.report) if self.report else "",
                                             f"warnings: {warnings}" if warnings else ""]))
        self.ledger.finish_attempt(attempt_id, session_stats(self.records, failed=not ended), baseline_id=None,
                                   speedup=None, verdict=self.verdict, notes=self.notes, cache=self.cache,
                                   verdict_reason="interrupted" if self.interrupted else self.failure or
                                   "a session is measured on its own; compare sessions with --ab")

    def result(self, cls: type) -> Any:
        memory = f"{self.memory_limit} — {self.memory_outcome}" if self.memory_limit else ""
        return cls(self.attempt_id, self.file, self.device, self.cache, self.resident_before, self.report,
                   self.verdict, self.notes, self.error, dict(self.resident_files), memory, self.memory_method,
                   self.memory_outcome, self.memory_limit)


def session_stats(records: list[TurnRecord], failed: bool = False) -> AttemptStats:
    """Turn seconds as the samples (median/min/max/spread); GB/s is all bytes staged over all turn time."""
    from workbench.measure.run.stats import STABLE_SPREAD_PCT

    seconds = [r.seconds for r in records]
    if not seconds:
        return AttemptStats(0, int(failed), None, None, None, None, None, stable=False)
    median, low, high = statistics.median(seconds), min(seconds), max(seconds)
    spread = (high - low) / median * 100 if median > 0 else None
    total = sum(seconds)
    gbps = sum(r.bytes_read for r in records) / total / 1e9 if total > 0 else None
    return AttemptStats(len(seconds), int(failed), median, low, high, spread, gbps,
                        spread is not None and spread <= STABLE_SPREAD_PCT)


def summary_line(report: SessionReport) -> str:
    """What the attempt's notes say of a session: the leak against its bound, tok/s, where the time
    went (the residual without the stalls and the cache's bookkeeping), the shift copy, bytes per
    token by source, steady state, the per-token latency and stall percentiles, and what was
    prefetched (a predictor's precision, recall and the bytes it read ahead unused)."""
    s = report.summary
    f = s.facts or SessionFacts("", "", "", "", "", "", "", 0, 0, 0, "", "", "", False)
    mib = 2**20
    wall = (f" = {s.staged_of_wall:.0%} of {s.wall_name} ({s.wall_gbps:.2f})" if s.staged_of_wall is not None else
            "" if s.wall_gbps else f" ({NO_WALL})")
    if s.staged_of_wall_median is not None:
        wall += f", the median turn's {s.staged_of_wall_median:.0%} of its wall"
    book = (f"bookkeeping {s.bookkeeping_s:.3f} s ({s.bookkeeping_s / s.tokens * 1e3:.2f} ms/token)"
            if s.bookkeeping_s >= 0 else "bookkeeping not timed (in the residual)")
    return (f"{s.turns} turns × {report.turns[0].tokens} tokens; {growth_line(s)}; tok/s {s.tokens_per_s:.2f} "
            f"(median {s.tokens_per_s_median:.2f}, {s.tokens_per_s_min:.2f}–{s.tokens_per_s_max:.2f}); residual "
            f"{s.residual_s_per_token * 1e3:.2f} ms/token (the turn less stalls and bookkeeping); stalls read "
            f"{s.stall_read_s:.2f} s, upload {s.stall_upload_s:.2f} s, route {s.stall_route_s:.3f} s; {book}; "
            f"compute {s.compute_s:.2f} s; shift copy {s.shift_copy_bytes_per_token / mib:.2f} MiB/token, "
            f"{s.shift_copy_s / s.tokens * 1e3:.2f} ms/token of the reads; hit rate "
            f"{s.hit_rate:.0%} ({f.policy}, cache {f.cache_bytes / mib:.1f} MiB); MiB/token hit {s.hit_bytes_per_token / mib:.2f}, page cache "
            f"{s.page_cache_bytes_per_token / mib:.2f}, disk {s.disk_bytes_per_token / mib:.2f}; staged "
            f"{s.staged_gbps:.2f} GB/s{wall} at queue depth {s.read_queue_depth:.1f}; {steady_line(s)}; "
            f"{f.placement_report}; reader {f.reader}; lanes {f.lanes}{' overlap' if f.overlap else ''}"
            f"{f' ({f.lane_options})' if f.lane_options else ''}; "
            f"compute {f.compute}{_advice(f, s)}{_uploads(f)}; {tail_line(s)}{_prefetch(f, s)}{_misses(f, s)}")


def _misses(f: SessionFacts, s: Any) -> str:
    """How misses were served (--miss), with the per-token fetch, host and device compute times."""
    said = miss_line(s, f.miss.split(" ")[0] or "fetch")
    return f"; {said}" if said else ""


def _prefetch(f: SessionFacts, s: Any) -> str:
    """What was staged ahead with overlap, and (a predictor) how right it was and what it read."""
    if not f.overlap:
        return ""
    did = tally_line(s, s.tokens)
    return f"; prefetch {f.prefetch}" + (f"; {did}" if did else "")


def _uploads(f: SessionFacts) -> str:
    """How landed slices went to the device, when not the default (pageable copies, one thread)."""
    how = "; uploads through page-locked staging" if f.uploader == "pinned" else ""
    threads = f.upload_threads
    if threads > 1:
        how += f"{'' if how else '; uploads'} by {threads} copy threads"
    return how


def _advice(f: SessionFacts, s: Any) -> str:
    """The release advice when it is not the default: MADV_FREE leaves pages resident to mincore and RSS."""
    if f.release_advice == "dontneed":
        return ""
    if f.release_advice == "recycle":
        return (f"; release advice recycle: {s.recycled_pages:,} pages ({s.recycled_pages * PAGE / 2**20:,.1f} MiB) "
                "of evicted slots taken over by the misses that evicted them (mremap), the rest MADV_DONTNEED")
    lazy = (f"{s.lazyfree_bytes_last / 2**20:,.1f} MiB LazyFree at the end (max {s.lazyfree_bytes_max / 2**20:,.1f})"
            if s.lazyfree_bytes_last >= 0 else "LazyFree unknown (the kernel reports none)")
    return (f"; release advice {f.release_advice} (MADV_FREE): {lazy}, resident to mincore and RSS, released to the "
            "cache and taken out of the resident and anonymous comparisons")
