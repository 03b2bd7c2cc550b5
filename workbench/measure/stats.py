"""Statistics over an attempt's runs and the noise-aware verdict against a baseline.

Pure functions: the runner calls them, the ledger stores what they return, the notebooks re-derive
them from the raw samples the ledger keeps.
"""
from __future__ import annotations

import statistics
from typing import Sequence

from workbench.records import AttemptStats, RunRecord

STABLE_SPREAD_PCT = 10.0  # above this the spread is loud enough that a reader must be told
MIN_RUNS_FOR_VERDICT = 2  # one run measures no spread, so no difference can be told from noise


def counts_as_sample(run: RunRecord) -> bool:
    """A run enters the statistics when it finished and its device bytes were not found wrong."""
    return run.ok and run.verified is not False


def summarize(runs: Sequence[RunRecord], nbytes: int) -> AttemptStats:
    """Median/min/max/spread/GB/s over the runs that count; the others are ``n_failed``.

    Parameters
    ----------
    runs
        Every run of the attempt, failed ones included (they are counted, never dropped).
    nbytes
        Bytes one load moves, for GB/s from the median load window.
    """
    samples = [float(r.load_s) for r in runs if counts_as_sample(r)]  # type: ignore[arg-type]
    n_failed = len(runs) - len(samples)
    if not samples:
        return AttemptStats(0, n_failed, None, None, None, None, None, stable=False)
    median = statistics.median(samples)
    low, high = min(samples), max(samples)
    spread = (high - low) / median * 100 if median > 0 else None
    gbps = nbytes / median / 1e9 if median > 0 else None
    stable = spread is not None and spread <= STABLE_SPREAD_PCT
    return AttemptStats(len(samples), n_failed, median, low, high, spread, gbps, stable)


def judge(base: AttemptStats, new: AttemptStats) -> tuple[float | None, str]:
    """Speedup of ``new`` over ``base`` (base median / new median) and a noise-aware verdict.

    The rule:

    - ``failed`` when ``new`` has no successful run (speedup None);
    - ``inconclusive`` when ``base`` has no successful run (nothing to compare with; speedup None),
      when either attempt has fewer than two successful runs (its spread is unmeasured), or when
      ``|base.median - new.median|`` is no larger than the noise, the larger of the two attempts'
      absolute run-to-run spreads ``max_s - min_s``: a difference inside the spread is never a win;
    - otherwise ``faster`` when ``new.median < base.median``, else ``slower``.
    """
    if new.median_s is None:
        return None, "failed"
    if base.median_s is None:
        return None, "inconclusive"
    speedup = base.median_s / new.median_s if new.median_s > 0 else None
    if min(base.n, new.n) < MIN_RUNS_FOR_VERDICT:
        return speedup, "inconclusive"
    noise = max(_abs_spread(base), _abs_spread(new))
    if abs(base.median_s - new.median_s) <= noise:
        return speedup, "inconclusive"
    return speedup, "faster" if new.median_s < base.median_s else "slower"


def stability_warning(stats: AttemptStats) -> str | None:
    """One loud line when the spread exceeds 10 % of the median; None when the numbers are stable."""
    if stats.spread_pct is None or stats.spread_pct <= STABLE_SPREAD_PCT:
        return None
    return (
        f"WARNING: unstable measurement: spread {stats.spread_pct:.1f} % of the median over "
        f"{stats.n} runs (> {STABLE_SPREAD_PCT:.0f} %); differences smaller than that are noise"
    )


def _abs_spread(stats: AttemptStats) -> float:
    if stats.max_s is None or stats.min_s is None:
        return 0.0
    return stats.max_s - stats.min_s
