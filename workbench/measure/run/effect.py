"""The effect of a change: the ratio of medians with a bootstrap confidence interval, and its verdict.

The rule as users read it is README, "Measuring honestly"; the runner applies it in
``measure/run/attempt.py`` (``compare_runs``/``decide``), pairing the rounds of one comparison.

Speedup is ``median(baseline) / median(candidate)``: above 1 the candidate is faster. The interval is
a seeded bootstrap of that ratio, so the same samples always give the same interval.

How the runs are resampled:

- **by round** when both attempts were measured interleaved in one comparison and have at least
  ``MIN_PAIRED_ROUNDS`` complete rounds (round k = the k-th run of each): a resample draws whole rounds,
  so drift that moves both runs of a round together cancels in the ratio. Below six rounds pairing is
  not used: with five pairs, two identical configurations fall all the same way one time in sixteen,
  and then every resample lies on one side — no paired method can reach a 5 % error rate there;
- otherwise each attempt's runs are resampled independently.

The interval is the *expanded* percentile interval (Hesterberg 2015, "What teachers should know about
the bootstrap"): plain percentile intervals are too narrow for the handful of runs a load benchmark
has, so the tails are taken at ``α' = 2 Φ(−√(n/(n−1)) · t_{n−1, 1−α/2})`` instead of ``α``.

The verdict: ``faster`` / ``slower`` only when the interval excludes 1 *and* the point estimate is at
least ``min_effect`` away from 1 (a 0.5 % win that is real is still not worth a PR line); fewer than
``MIN_RUNS`` runs on either side is ``inconclusive`` with the reason ``n < 3``.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

from workbench.records.effect import Effect

MIN_RUNS = 3
MIN_PAIRED_ROUNDS = 6
DEFAULT_MIN_EFFECT = 0.02
DEFAULT_RESAMPLES = 4000
DEFAULT_SEED = 0
CONFIDENCE = 0.95

# Student's t, two-sided 95 % (upper 0.975 quantile), by degrees of freedom; normal beyond 30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def expanded_alpha(n: int, alpha: float = 1 - CONFIDENCE) -> float:
    """Hesterberg's small-sample tail probability for a percentile interval from ``n`` observations."""
    if n < 2:
        return 0.0
    if alpha != 1 - CONFIDENCE:
        raise ValueError("only the 95 % interval has a t table here")
    t = _T975[n - 2] if n - 1 <= len(_T975) else NormalDist().inv_cdf(1 - alpha / 2)
    return 2 * NormalDist().cdf(-math.sqrt(n / (n - 1)) * t)


def ratio_effect(baseline: Sequence[float], candidate: Sequence[float], *, paired: bool = False,
                 min_effect: float = DEFAULT_MIN_EFFECT, resamples: int = DEFAULT_RESAMPLES,
                 seed: int = DEFAULT_SEED) -> Effect:
    """The candidate's speedup over the baseline with its interval and verdict.

    Parameters
    ----------
    baseline, candidate
        Load times in seconds; with ``paired`` they are in round order (``baseline[k]`` and
        ``candidate[k]`` ran in the same round of an interleaved comparison).
    paired
        Resample whole rounds (only used from ``MIN_PAIRED_ROUNDS`` complete rounds on).
    min_effect
        The smallest relative difference worth a verdict (0.02: 2 %).
    """
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if a.size == 0 or b.size == 0:
        return Effect(None, None, None, "inconclusive", "no successful run to compare", "")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and a.min() > 0 and b.min() > 0):
        # a zero-length window (an engine printing its start and end marker in one write) or a
        # non-finite time has no ratio worth a verdict; say so instead of dividing by it
        return Effect(None, None, None, "inconclusive", "a run time that is zero or not finite", "")
    speedup = float(np.median(a) / np.median(b))
    if min(a.size, b.size) < MIN_RUNS:
        return Effect(speedup, None, None, "inconclusive", f"n < {MIN_RUNS}", "")
    rng = np.random.default_rng(seed)
    rounds = min(a.size, b.size)
    if paired and rounds >= MIN_PAIRED_ROUNDS:
        idx = rng.integers(0, rounds, size=(resamples, rounds))
        ratios = np.median(a[:rounds][idx], axis=1) / np.median(b[:rounds][idx], axis=1)
        method, n = "paired rounds", rounds
    else:
        ia = rng.integers(0, a.size, size=(resamples, a.size))
        ib = rng.integers(0, b.size, size=(resamples, b.size))
        ratios = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
        method, n = "independent runs", min(a.size, b.size)
    tail = expanded_alpha(n) / 2
    low, high = (float(q) for q in np.quantile(ratios, [tail, 1 - tail]))
    verdict, reason = _verdict(speedup, low, high, min_effect)
    return Effect(speedup, low, high, verdict, reason, method)


def _verdict(speedup: float, low: float, high: float, min_effect: float) -> tuple[str, str]:
    if low <= 1.0 <= high:
        return "inconclusive", "interval includes 1"
    if abs(math.log(speedup)) < math.log1p(min_effect):
        return "inconclusive", f"effect under the {min_effect:.0%} minimum"
    return ("faster" if low > 1.0 else "slower"), "interval excludes 1"
