"""An attempt's outcome as the runner returns it, and how its verdict is reached."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from workbench.records import (
    AttemptStats,
    Effect,
    ExternalRun,
    RunConfig,
    RunRecord,
    Timings,
    WorkerReport,
    failure_reason,
    fixed_parts,
    format_effect,
    format_verdict,
    split_load,
    verdict_n,
)

from workbench.records.baseline_match import with_across

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
    ci_low: float | None = None
    ci_high: float | None = None
    verdict_reason: str = ""
    ceiling_name: str | None = None
    ceiling_gbps: float | None = None
    ceiling_fraction: float | None = None
    label: str = ""
    cache_requested: str = ""
    notes: str = ""
    recorded: str = "all"  # what the ledger holds of it: all, part (some runs), none (a write failed)
    verdict_n: int | None = None  # runs a side behind the verdict (fewer than 5: not a claim)
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the machine's load-path settings
    baseline_across: str = ""  # what the baseline measured differently (another model …), asked for anyway

    @property
    def split(self) -> tuple[float | None, float | None]:
        """Median (fixed, streaming) seconds over the successful runs (records/fixed.py); None if none."""
        parts = [p for p in (run_split(r) for r in self.runs if r.ok) if p is not None]
        if not parts:
            return None, None
        return statistics.median(f for f, _ in parts), statistics.median(s for _, s in parts)

    @property
    def verdict_text(self) -> str:
        """``faster``, or ``faster (n=3 < 5: not a claim)``: the verdict as every table shows it."""
        return format_verdict(self.verdict, n=self.verdict_n)

    @property
    def effect(self) -> str:
        """``1.14× [1.05–1.22]`` against the baseline; ``baseline`` for the baseline itself."""
        if self.verdict == "baseline":
            return "baseline"
        return with_across(format_effect(self.speedup, self.ci_low, self.ci_high),
                           {"baseline_across": self.baseline_across})

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
            "speedup": self.speedup, "ci_low": self.ci_low, "ci_high": self.ci_high,
            "verdict_reason": self.verdict_reason, "warning": self.warning, "ceiling_name": self.ceiling_name,
            "ceiling_gbps": self.ceiling_gbps, "ceiling_fraction": self.ceiling_fraction,
            "notes": self.notes, "recorded": self.recorded, "verdict_n": self.verdict_n,
            "verdict_text": self.verdict_text, "fixed_s": self.split[0], "streaming_s": self.split[1],
            "settings": dict(self.settings), "baseline_across": self.baseline_across, "effect": self.effect,
        }


def run_to_json(run: RunRecord) -> dict[str, Any]:
    """A run's issue keys first, then cache, lock and the worker's own timings."""
    d = run.to_json()
    out = {k: d[k] for k in RUN_KEYS}
    out.update(cache_state=run.cache_state, cache_reached=run.cache_reached,
               resident_files=dict(run.resident_files),  # each file of the model before the run
               lock_wait_s=run.lock_wait_s, overhead_s=run_overhead(run),
               timings={} if run.report.timings is None else run.report.timings.to_json())
    load = run.report.load
    if load is not None:  # what the ledger holds of the load beyond its phases: counters and costs
        out.update(counters=dict(load.counters), path=load.path.to_json())
    split = run_split(run)
    if split is not None and load is not None:
        out.update(fixed_s=split[0], streaming_s=split[1], fixed={k: v for k, v in fixed_parts(
            load.phases or run.phases, load.counters).items()})
    if run.report.costs is not None:
        out["costs"] = run.report.costs.to_json()
    if run.report.cache_error:
        out["cache_error"] = run.report.cache_error
    if run.report.external is not None:  # an engine's run: its markers, phase lines and build
        out["external"] = run.report.external.to_json()
    return out


def run_split(run: RunRecord) -> tuple[float, float] | None:
    """(fixed, streaming) seconds of a successful run's window; None without a load report."""
    load = run.report.load
    if not run.ok or load is None or run.load_s is None:
        return None
    return split_load(run.load_s, {**load.phases, **({"index": run.phases["index"]} if "index" in run.phases
                                                     else {})}, load.counters)


def run_from_json(data: Mapping[str, Any]) -> RunRecord:
    """A run back from :func:`run_to_json` (or from an unrecorded dump, whose runs also carry the whole
    report under ``result``). Without ``result`` the report is what ``run_to_json`` kept of it: the
    worker's timings, the cache error and an engine's run."""
    if "result" in data:
        return RunRecord.from_json(data)
    timings, external = data.get("timings"), data.get("external")
    report = WorkerReport(timings=Timings.from_json(timings) if timings else None,
                          external=None if external is None else ExternalRun.from_json(external),
                          cache_error=data.get("cache_error"))
    return dataclasses.replace(RunRecord.from_json(data), report=report)


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


@dataclass(frozen=True)
class Decision:
    """An attempt's verdict against its baseline: the speedup with its interval, and why."""

    verdict: str
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""  # why the verdict is what it is ("interval excludes 1 (paired rounds)", "n < 3" …)
    note: str = ""  # what goes into the attempt's notes (a failure, a baseline without runs)
    n: int | None = None  # runs a side it rests on (the smaller side's successful runs)


def compare_runs(base_runs: Sequence[RunRecord], runs: Sequence[RunRecord], *, paired: bool,
                 min_effect: float) -> Effect:
    """The effect of ``runs`` against ``base_runs`` by the verdict rule (README, "Measuring honestly").

    ``paired``: both were measured interleaved in one comparison, so round k is the k-th run of each;
    only rounds where both runs count (finished, bytes not wrong) form a pair."""
    from workbench.measure.run.effect import ratio_effect
    from workbench.measure.run.stats import counts_as_sample, samples

    if paired:
        pairs = [(float(b.load_s), float(r.load_s)) for b, r in zip(base_runs, runs)  # type: ignore[arg-type]
                 if counts_as_sample(b) and counts_as_sample(r)]
        base, new = [b for b, _ in pairs], [r for _, r in pairs]
    else:
        base, new = samples(base_runs), samples(runs)
    return ratio_effect(base, new, paired=paired, min_effect=min_effect)


def decide(runs: Sequence[RunRecord], base_runs: Sequence[RunRecord] | None, *, is_baseline: bool,
           paired: bool, min_effect: float) -> Decision:
    """The verdict of one attempt; ``base_runs`` None means there is nothing to compare with."""
    from workbench.measure.run.stats import samples

    failure = run_failures(runs)
    effect = None
    if base_runs is not None and not is_baseline:
        effect = compare_runs(base_runs, runs, paired=paired, min_effect=min_effect)
    speedup = effect.speedup if effect is not None else None
    if failure or not samples(runs):
        failure = failure or "no successful run"
        return Decision("failed", speedup, reason=failure, note=failure)
    if is_baseline:
        return Decision("baseline", 1.0)
    if effect is None or not samples(base_runs or ()):
        why = "the baseline has no successful run to compare with"
        return Decision("inconclusive", reason=why, note=why)
    reason = f"{effect.reason} ({effect.method})" if effect.method else effect.reason
    n = verdict_n(len(samples(runs)), len(samples(base_runs or ())))
    return Decision(effect.verdict, effect.speedup, effect.ci_low, effect.ci_high, reason, n=n)


def effective_state(label: str, runs: Sequence[RunRecord]) -> str | None:
    """'cold' or 'warm' for picking a ceiling; an asis attempt goes by where its runs started."""
    if label in ("cold", "warm"):
        return label
    fractions = [r.resident_before for r in runs if r.resident_before is not None]
    if not fractions:
        return None
    mid = statistics.median(fractions)
    return "cold" if mid <= 0.1 else "warm" if mid >= 0.9 else None
