"""A session's summary: totals, where the time went, bytes per token by source, the leak against its
bound, and when tok/s and the hit rate settled (:mod:`workbench.expert.steady`)."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from workbench.expert.miss.server import miss_fields
from workbench.expert.prefetch.tally import tally_fields
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.steady import DEFAULT_SLOPE_PCT, DEFAULT_WINDOW, drift_after, steady_from
from workbench.records.token_tail import tail_fields

# metric → per-turn value: what drift_after watches once tok/s and the hit rate are steady
_DRIFT = {
    "tokens_per_s": lambda r: r.tokens_per_s, "hit_rate": lambda r: r.hit_rate,
    "majflt_per_token": lambda r: r.majflt / r.tokens, "disk_bytes_per_token": lambda r: r.disk_bytes_per_token,
    "anon_bytes": lambda r: r.held_anon_bytes, "unreleased_pages": lambda r: r.unreleased_pages,
}


@dataclass(frozen=True)
class SessionSummary:
    """Totals over the turns, and the numbers that tell a leak from a cost."""

    turns: int
    tokens: int
    bytes_read: int
    hits: int
    misses: int
    hit_rate: float
    evictions: int
    minflt: int
    majflt: int
    shift_copy_bytes: int
    unreleased_pages_first: int
    unreleased_pages_last: int
    leak_bound_pages: int  # the most release=off can leave committed (pages slots only partly cover)
    leak_of_bound: float | None  # unreleased pages at the end over the bound (None: nothing can leak)
    leak_half_turn: int | None  # the first turn at which half the bound was unreleased
    resident_minus_accounted_bytes: int  # last turn: what the cache failed to give back, measured (less LazyFree)
    anon_minus_accounted_growth_bytes: int  # (actual_anon - lazyfree - accounted), last turn minus first
    tokens_per_s: float  # all tokens over all turn time
    tokens_per_s_median: float
    tokens_per_s_min: float
    tokens_per_s_max: float
    seconds: float
    compute_s: float
    stall_read_s: float
    stall_upload_s: float
    stall_route_s: float
    other_s: float
    residual_s_per_token: float
    hit_bytes_per_token: float
    page_cache_bytes_per_token: float
    disk_bytes_per_token: float
    bytes_read_per_token: float
    landed_bytes_per_token: float
    read_queue_depth: float
    staged_gbps: float
    steady_tokens_per_s_turn: int | None  # from this turn on every window passes fio's slope test (None: not steady)
    steady_hit_rate_turn: int | None
    drift: dict[str, float] = field(default_factory=dict)  # metric → fitted % change after steady state
    majflt_per_token: float = 0.0
    rss_bytes_max: int = -1
    swap_bytes_max: int = -1
    cg_refaults: int = -1
    cg_limit_hits: int = -1
    wall_name: str = ""  # the machine's read wall the staged GB/s is held against
    wall_gbps: float | None = None
    staged_of_wall: float | None = None
    staged_of_wall_median: float | None = None  # the median of the turns' own fractions (turns with misses)
    verified_slices: int = 0
    facts: SessionFacts | None = None
    bookkeeping_s: float = -1.0  # the cache's work on the decode thread (-1: turns recorded before it was timed)
    shift_copy_s: float = 0.0  # the bounce reader's copies (on the lanes that read)
    shift_copy_bytes_per_token: float = 0.0
    steady_window: int = DEFAULT_WINDOW
    steady_slope_pct: float = DEFAULT_SLOPE_PCT
    lazyfree_bytes_last: int = 0  # last turn: resident pages handed back with MADV_FREE (out of the two above)
    lazyfree_bytes_max: int = 0
    recycled_pages: int = 0  # every turn's: evicted pages misses' slots took over (release_advice="recycle")
    # every token of every turn (the first turn's cache filling included): workbench.records.token_tail
    token_n: int = 0  # tokens the percentiles rest on (0: turns recorded before tokens were)
    token_p50_ms: float | None = None
    token_p90_ms: float | None = None
    token_p99_ms: float | None = None  # nearest rank: below 100 tokens, the slowest token (token_tail.p99_caveat)
    token_p99_note: str = ""  # what the p99s rest on, in words ("n = 64 tokens; p99 is the slowest token: …")
    token_max_ms: float | None = None
    stall_p50_ms: float | None = None
    stall_p90_ms: float | None = None
    stall_p99_ms: float | None = None
    stall_max_ms: float | None = None
    stall_ms_per_token: float | None = None
    # what the predictor did (workbench.expert.prefetch.tally; -1 and None where none ran)
    prefetch_named: int = -1
    prefetch_right: int = -1
    prefetch_routed: int = -1
    prefetch_bytes: int = -1
    prefetch_unused_bytes: int = -1
    prefetch_never_used_bytes: int = -1
    prefetch_late_bytes: int = -1
    prefetch_idle_bytes: int = -1  # the last turn's: read ahead, still live and unused at the end
    prefetch_dropped: int = -1
    prefetch_layers: int = -1  # (token, layer)s staged for: what precision and recall are over
    prefetch_skipped_layers: int = -1  # planned to run on the host (--miss host|auto): nothing staged, not scored
    prefetch_skipped_named: int = -1
    prefetch_skipped_bytes: int = -1  # what those would have read: the reads the skip saved
    prefetch_precision: float | None = None
    prefetch_recall: float | None = None
    # how misses were served (--miss; workbench.expert.miss.server.miss_fields): experts; -1/None recorded before
    miss_fetched: int = -1
    miss_host: int = -1
    miss_host_hits: int = -1  # hits auto's host tokens computed on the host too
    miss_host_bytes: int = -1
    fetch_ms_per_token: float | None = None  # read + upload waits
    host_ms_per_token: float | None = None  # misses computed on the host
    device_ms_per_token: float | None = None  # the device compute
    miss_fetch_token_ms: float | None = None  # auto: a fetch token's median, the last turn's
    miss_host_token_ms: float | None = None  # and a host token's
    miss_probe_tokens: int = -1  # auto: tokens begun as probes (-1: not auto)
    miss_probe_ms: float | None = None  # their layers' seconds run the probed way

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["facts"] = self.facts.to_json() if self.facts is not None else None
        return out


@dataclass(frozen=True)
class SessionReport:
    """Every turn and the summary: the session's one typed result."""

    turns: tuple[TurnRecord, ...]
    summary: SessionSummary

    def to_json(self) -> dict[str, Any]:
        """``session --json``: every turn's record (the first issue's keys first), then the summary."""
        return {"turns": [t.to_json() for t in self.turns], "summary": self.summary.to_json()}


def summarize(records: Sequence[TurnRecord], facts: SessionFacts, verified_slices: int = 0, *,
              wall: tuple[str, float] | None = None, window: int = DEFAULT_WINDOW,
              slope_pct: float = DEFAULT_SLOPE_PCT) -> SessionSummary:
    """Totals and leak indicators over ``records`` (at least one turn); ``wall`` the (name, GB/s) of
    the machine's read wall for these reads, when one is recorded."""
    if not records:
        raise ValueError("a session summary needs at least one turn")
    first, last = records[0], records[-1]
    total = lambda key: sum(getattr(r, key) for r in records)  # noqa: E731
    tokens, seconds = total("tokens"), total("seconds")
    hits, misses, busy = total("hits"), total("misses"), total("read_busy_s")
    rates = [r.tokens_per_s for r in records]
    bound = facts.leak_bound_pages
    per_token = lambda key: sum(getattr(r, key) * r.tokens for r in records) / tokens  # noqa: E731
    staged = total("bytes_read") / busy / 1e9 if busy > 0 else 0.0
    steady_rate = steady_from(rates, window, slope_pct)
    steady_hits = steady_from([r.hit_rate for r in records], window, slope_pct)
    return SessionSummary(
        turns=len(records), tokens=tokens, bytes_read=total("bytes_read"), hits=hits, misses=misses,
        hit_rate=hits / max(1, hits + misses), evictions=total("evictions"), minflt=total("minflt"),
        majflt=total("majflt"), shift_copy_bytes=total("shift_copy_bytes"),
        unreleased_pages_first=first.unreleased_pages, unreleased_pages_last=last.unreleased_pages,
        leak_bound_pages=bound, leak_of_bound=last.unreleased_pages / bound if bound else None,
        leak_half_turn=next((r.turn for r in records if bound and r.unreleased_pages * 2 >= bound), None),
        resident_minus_accounted_bytes=last.held_resident_bytes - last.accounted_bytes,
        anon_minus_accounted_growth_bytes=((last.held_anon_bytes - last.accounted_bytes)
                                           - (first.held_anon_bytes - first.accounted_bytes)),
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0, tokens_per_s_median=statistics.median(rates),
        tokens_per_s_min=min(rates), tokens_per_s_max=max(rates), seconds=seconds, compute_s=total("compute_s"),
        stall_read_s=total("stall_read_s"), stall_upload_s=total("stall_upload_s"),
        stall_route_s=total("stall_route_s"), other_s=total("other_s"),
        residual_s_per_token=per_token("residual_s_per_token"), hit_bytes_per_token=per_token("hit_bytes_per_token"),
        page_cache_bytes_per_token=per_token("page_cache_bytes_per_token"),
        disk_bytes_per_token=per_token("disk_bytes_per_token"), bytes_read_per_token=total("bytes_read") / tokens,
        landed_bytes_per_token=total("landed_bytes") / tokens,
        read_queue_depth=sum(r.read_queue_depth * r.read_busy_s for r in records) / busy if busy > 0 else 0.0,
        staged_gbps=staged, steady_tokens_per_s_turn=steady_rate, steady_hit_rate_turn=steady_hits,
        drift=_drifts(records, steady_rate, steady_hits), majflt_per_token=total("majflt") / tokens,
        rss_bytes_max=max(r.rss_bytes for r in records), swap_bytes_max=max(r.swap_bytes for r in records),
        cg_refaults=_sum_known(r.cg_refaults for r in records),
        cg_limit_hits=_sum_known(r.cg_limit_hits for r in records),
        wall_name=wall[0] if wall else "", wall_gbps=wall[1] if wall else None,
        staged_of_wall=staged / wall[1] if wall and wall[1] > 0 and staged > 0 else None,
        staged_of_wall_median=_median([r.staged_of_wall for r in records if r.staged_of_wall is not None]),
        verified_slices=verified_slices, facts=facts, bookkeeping_s=_sum_known(r.bookkeeping_s for r in records),
        shift_copy_s=sum(max(0.0, r.shift_copy_s) for r in records),
        shift_copy_bytes_per_token=total("shift_copy_bytes") / tokens, steady_window=window, steady_slope_pct=slope_pct,
        lazyfree_bytes_last=last.lazyfree_bytes, lazyfree_bytes_max=max(r.lazyfree_bytes for r in records),
        recycled_pages=sum(r.recycled_pages for r in records),
        **tail_fields(records), **tally_fields(records), **miss_fields(records),
    )


def _drifts(records: Sequence[TurnRecord], *steady: int | None) -> dict[str, float]:
    """Each watched metric's drift after the later of the steady turns (none before a steady state)."""
    if any(s is None for s in steady):
        return {}
    start = max(s for s in steady if s is not None)
    out = {}
    for name, value in _DRIFT.items():
        series = [float(value(r)) for r in records]
        if min(series) < 0:  # not measured here (-1)
            continue
        pct = drift_after(series, start)
        if pct is not None:
            out[name] = round(pct, 1)
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _sum_known(values: Any) -> int:
    known = [v for v in values if v >= 0]
    return sum(known) if known else -1


def growth_line(s: SessionSummary) -> str:
    """``unreleased pages 0 → 1,092 of the 1,200 the model can leak (91 %; half by turn 3)``."""
    head = f"unreleased pages {s.unreleased_pages_first:,} → {s.unreleased_pages_last:,}"
    if not s.leak_bound_pages:
        return f"{head} (this layout has no boundary pages to leak)"
    half = f"; half by turn {s.leak_half_turn}" if s.leak_half_turn is not None else ""
    return f"{head} of the {s.leak_bound_pages:,} the model can leak ({s.leak_of_bound:.0%}{half})"


def steady_line(s: SessionSummary) -> str:
    """``tok/s steady from turn 3, hit rate from turn 2 (every 5-turn window from there within 2 % of its
    mean a turn); drifts after: majflt_per_token +12.0 %``, or which is not steady and why."""
    rule = f"every {s.steady_window}-turn window from there within {s.steady_slope_pct:g} % of its mean a turn"
    rate, hits = s.steady_tokens_per_s_turn, s.steady_hit_rate_turn
    if rate is None or hits is None:
        missing = " and ".join(n for n, t in (("tok/s", rate), ("hit rate", hits)) if t is None)
        why = (f"{s.turns} turns are fewer than one {s.steady_window}-turn window" if s.turns < s.steady_window else
               f"the last {s.steady_window}-turn window still moves more than {s.steady_slope_pct:g} % a turn")
        held = "; ".join(f"{n} steady from turn {t}" for n, t in (("tok/s", rate), ("hit rate", hits)) if t is not None)
        return f"{missing} not steady ({why}){'; ' + held if held else ''}"
    drift = ", ".join(f"{k} {v:+.1f} %" for k, v in s.drift.items()) or "nothing"
    return f"tok/s steady from turn {rate}, hit rate from turn {hits} ({rule}); drifts after: {drift}"
