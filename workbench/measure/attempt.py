"""An attempt's outcome as the runner returns it, and how its verdict is reached."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from workbench.records import AttemptStats, RunConfig, RunRecord, failure_reason

# The keys of ``--json`` output the issue fixes, in order; extras follow them.
ATTEMPT_KEYS = ("attempt_id", "strategy", "params", "device", "cache", "n", "median_s", "min_s",
                "max_s", "spread_pct", "gbps", "verdict", "runs")
RUN_KEYS = ("pid", "position", "load_s", "wall_s", "bytes", "resident_before", "verified", "engaged",
            "phases", "minflt", "majflt", "error")


@dataclass(frozen=True)
class AttemptResult:
    """One configuration measured: its runs, statistics, verdict against the baseline, and ceiling."""

    attempt_id: str
    config: RunConfig
    cache: str  # the honest label: "cold"/"warm"/"asis", or "asis(unreachable: …)"
    runs: tuple[RunRecord, ...]
    stats: AttemptStats
    baseline_id: str | None
    speedup: float | None
    verdict: str
    warning: str | None = None
    ceiling_name: str | None = None
    ceiling_gbps: float | None = None
    ceiling_fraction: float | None = None
    label: str = ""
    cache_requested: str = ""
    notes: str = ""

    def to_json(self) -> dict[str, Any]:
        """The issue's keys first (attempt_id … runs), then the extras."""
        s = self.stats
        return {
            "attempt_id": self.attempt_id, "strategy": self.config.strategy,
            "params": dict(self.config.params), "device": self.config.device, "cache": self.cache,
            "n": s.n, "median_s": s.median_s, "min_s": s.min_s, "max_s": s.max_s,
            "spread_pct": s.spread_pct, "gbps": s.gbps, "verdict": self.verdict,
            "runs": [run_to_json(r) for r in self.runs],
            "label": self.label, "file": self.config.file, "cache_requested": self.cache_requested,
            "n_failed": s.n_failed, "stable": s.stable, "baseline_id": self.baseline_id,
            "speedup": self.speedup, "warning": self.warning, "ceiling_name": self.ceiling_name,
            "ceiling_gbps": self.ceiling_gbps, "ceiling_fraction": self.ceiling_fraction,
            "notes": self.notes,
        }


def run_to_json(run: RunRecord) -> dict[str, Any]:
    """A run's issue keys first, then cache, lock and the worker's own timings."""
    d = run.to_json()
    out = {k: d[k] for k in RUN_KEYS}
    out.update(cache_state=run.cache_state, cache_reached=run.cache_reached,
               lock_wait_s=run.lock_wait_s, overhead_s=run_overhead(run),
               timings={} if run.report.timings is None else run.report.timings.to_json())
    if run.report.cache_error:
        out["cache_error"] = run.report.cache_error
    return out


def run_overhead(run: RunRecord) -> float | None:
    """Harness cost of a run: whole-process wall minus the load window."""
    if run.wall_s is None or run.load_s is None:
        return None
    return run.wall_s - run.load_s


def cache_label(asked: str, runs: Sequence[RunRecord]) -> str:
    """``asked`` when every run reached it; otherwise say plainly that it was not reached."""
    if asked == "asis":
        return "asis"
    missed = [r for r in runs if not r.cache_reached]
    if not missed:
        return asked
    detail = next((r.report.cache_error for r in missed if r.report.cache_error), "")
    return f"asis(unreachable: {asked}, {len(missed)}/{len(runs)} runs; {detail})"[:300]


def run_failures(runs: Sequence[RunRecord]) -> str:
    """Why the attempt counts as failed ('' when it does not): a failed run or wrong device bytes."""
    if not runs:
        return ""  # nothing ran: decide() says "no successful run"
    errors = [r.error or "no load time" for r in runs if not r.ok]
    return failure_reason(len(runs), errors, sum(r.verified is False for r in runs))


def decide(stats: AttemptStats, runs: Sequence[RunRecord], base: AttemptStats | None,
           is_baseline: bool) -> tuple[float | None, str, str]:
    """(speedup, verdict, note) for one attempt; ``base`` None means nothing to compare with."""
    from workbench.measure.stats import judge

    reason = run_failures(runs)
    speedup = None
    if base is not None and not is_baseline and stats.median_s and base.median_s:
        speedup = base.median_s / stats.median_s
    if reason or stats.n == 0:
        return speedup, "failed", reason or "no successful run"
    if is_baseline:
        return 1.0, "baseline", ""
    if base is None or base.median_s is None:
        return None, "inconclusive", "the baseline has no successful run to compare with"
    speedup, verdict = judge(base, stats)
    return speedup, verdict, ""


def effective_state(label: str, runs: Sequence[RunRecord]) -> str | None:
    """'cold' or 'warm' for picking a ceiling; an asis attempt goes by where its runs started."""
    if label in ("cold", "warm"):
        return label
    fractions = [r.resident_before for r in runs if r.resident_before is not None]
    if not fractions:
        return None
    mid = statistics.median(fractions)
    return "cold" if mid <= 0.1 else "warm" if mid >= 0.9 else None
