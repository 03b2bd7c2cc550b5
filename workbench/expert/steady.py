"""Steady state and drift of a per-turn series, as fio's steady-state option judges a job.

fio (``ss=iops_slope:X%``, ``ss_dur``) declares a job steady once the least-squares slope of the metric
over a trailing window, as a percentage of the window's mean, stays under a limit. :func:`steady_from`
applies that test to every window of the series and returns the turn from which *every* window stays
under the limit (the first turn after the last window that did not), or None when the last window
does not: a series that held still for a while and then moved is not steady from its first quiet window.
:func:`drift_after` then asks whether the series still moves after it: the slope over everything
from the steady turn on, called a drift only when it is both large (the fitted change over that span
is at least ``min_change_pct`` of the mean) and clear of the noise (|t| ≥ 2 on the slope).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

DEFAULT_WINDOW = 5
DEFAULT_SLOPE_PCT = 2.0
DRIFT_MIN_CHANGE_PCT = 5.0


def _fit(y: np.ndarray) -> tuple[float, float, float]:
    """(slope per step, its standard error, mean) of a least-squares line through ``y``."""
    x = np.arange(len(y), dtype=float)
    xm, ym = x.mean(), float(y.mean())
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / sxx) if sxx else 0.0
    if len(y) <= 2:
        return slope, math.inf if len(y) < 2 else 0.0, ym
    resid = y - (ym + slope * (x - xm))
    se = math.sqrt(float((resid ** 2).sum()) / (len(y) - 2) / sxx) if sxx else math.inf
    return slope, se, ym


def relative_slope_pct(y: Sequence[float]) -> float:
    """The least-squares slope per step as a percentage of the mean (0 for a flat zero series)."""
    slope, _, mean = _fit(np.asarray(y, dtype=float))
    if mean == 0:
        return 0.0 if slope == 0 else math.inf
    return abs(slope) / abs(mean) * 100


def steady_from(values: Sequence[float], window: int = DEFAULT_WINDOW,
                slope_pct: float = DEFAULT_SLOPE_PCT) -> int | None:
    """The first turn from which every trailing ``window`` has a slope within ``slope_pct`` % of its
    mean per turn; None when the last window's is not (or the series is shorter than one window)."""
    y = np.asarray(values, dtype=float)
    if window < 2 or len(y) < window:
        return None
    start = 0
    for first in range(len(y) - window + 1):
        if relative_slope_pct(y[first:first + window]) > slope_pct:
            start = first + 1  # this window moved: steady can only begin after its first turn
    return start if start + window <= len(y) else None


def drift_after(values: Sequence[float], start: int,
                min_change_pct: float = DRIFT_MIN_CHANGE_PCT) -> float | None:
    """The fitted change from ``start`` to the end, in % of the mean, when it is a drift (large and
    |t| ≥ 2); None when the series holds still after ``start`` (or too few turns remain to tell)."""
    y = np.asarray(values[start:], dtype=float)
    if len(y) < 4:
        return None
    slope, se, mean = _fit(y)
    change = slope * (len(y) - 1)
    if mean == 0:
        return None if change == 0 else math.copysign(math.inf, change)
    pct = change / abs(mean) * 100
    clear = se == 0 or abs(slope) >= 2 * se
    return pct if abs(pct) >= min_change_pct and clear and slope != 0 else None
