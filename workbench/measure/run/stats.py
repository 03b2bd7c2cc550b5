"""Statistics over an attempt's runs, and the warning a reader must see when they are unstable.

Pure functions: the runner calls them, the ledger stores what they return, the notebooks re-derive
them from the raw samples the ledger keeps. The verdict against a baseline is
:func:`workbench.measure.run.effect.ratio_effect` (README, "Measuring honestly").
"""
from __future__ import annotations

import math
import statistics
from typing import Sequence

from workbench.records import AttemptStats, RunRecord

STABLE_SPREAD_PCT = 10.0  # above this the spread is loud enough that a reader must be told


def counts_as_sample(run: RunRecord) -> bool:
    """A run enters the statistics when it finished and its device bytes were not found wrong."""
    return run.ok and run.verified is not False


def samples(runs: Sequence[RunRecord]) -> list[float]:
    """The load windows of the runs that count, in run order."""
    return [float(r.load_s) for r in runs if counts_as_sample(r)]  # type: ignore[arg-type]


def summarize(runs: Sequence[RunRecord], nbytes: int) -> AttemptStats:
    """Median/min/max/spread/GB/s over the runs that count; the others are ``n_failed``.

    Parameters
    ----------
    runs
        Every run of the attempt, failed ones included (they are counted, never dropped).
    nbytes
        Bytes one load moves, for GB/s from the median load window.

    One run measures no spread: its ``spread_pct`` is None (shown as ``—``, never ``0.0 %``) and it
    is never ``stable``.
    """
    times = samples(runs)
    n_failed = len(runs) - len(times)
    if not times:
        return AttemptStats(0, n_failed, None, None, None, None, None, stable=False)
    median = statistics.median(times)
    low, high = min(times), max(times)
    spread = (high - low) / median * 100 if median > 0 and len(times) > 1 else None
    gbps = nbytes / median / 1e9 if median > 0 and nbytes > 0 else None  # no bytes vouched for: no GB/s
    stable = spread is not None and spread <= STABLE_SPREAD_PCT
    return AttemptStats(len(times), n_failed, median, low, high, spread, gbps, stable)


def stability_warning(stats: AttemptStats, runs: Sequence[RunRecord] = ()) -> str | None:
    """One loud line when an attempt's numbers cannot be read at face value; None when they can.

    An attempt of one run has no spread at all. Above a 10 % spread the line names the outlier run
    (the one farthest from the median, by ratio): which run of the attempt it was, its position in
    the interleaved order of the whole comparison, and its time, so a reader can look at that run.
    """
    if stats.n == 1:
        return "WARNING: one run: no spread measured, so nothing can be told from noise (≥ 5 runs for a claim)"
    if stats.spread_pct is None or stats.spread_pct <= STABLE_SPREAD_PCT:
        return None
    line = (f"WARNING: unstable measurement: spread {stats.spread_pct:.1f} % of the median over "
            f"{stats.n} runs (> {STABLE_SPREAD_PCT:.0f} %)")
    outlier = _outlier(runs, stats.median_s)
    if outlier is None:
        return line
    k, run = outlier
    return (f"{line}; the outlier is run {k + 1}/{len(runs)} (position {run.position} in the run order) "
            f"at {_ms(run.load_s)} against a median of {_ms(stats.median_s)}")


def _outlier(runs: Sequence[RunRecord], median: float | None) -> tuple[int, RunRecord] | None:
    counted = [(k, r) for k, r in enumerate(runs) if counts_as_sample(r) and r.load_s and r.load_s > 0]
    if not counted or not median:
        return None
    return max(counted, key=lambda kr: abs(math.log(kr[1].load_s / median)))  # type: ignore[operator]


def _ms(seconds: float | None) -> str:
    ms = (seconds or 0.0) * 1000
    return f"{ms:.{1 if ms >= 10 else 2 if ms >= 1 else 3}f} ms"
