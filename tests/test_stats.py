"""summarize / stability_warning: an attempt's numbers and when a reader must be warned (the verdict
against a baseline is tests/test_effect.py and tests/test_verdict_runner.py)."""
from __future__ import annotations

import statistics

import pytest

from ledger_helpers import NBYTES, make_run
from workbench.records import AttemptStats
from workbench.measure.run.stats import stability_warning, summarize


def stats_of(times: list[float]) -> AttemptStats:
    return summarize([make_run(i, t) for i, t in enumerate(times)], NBYTES)


def test_summarize_from_raw_samples():
    times = [0.40, 0.44, 0.42, 0.41, 0.43]
    s = summarize([make_run(i, t) for i, t in enumerate(times)], NBYTES)
    median = statistics.median(times)
    assert (s.n, s.n_failed) == (5, 0)
    assert s.median_s == pytest.approx(median)
    assert (s.min_s, s.max_s) == (0.40, 0.44)
    assert s.spread_pct == pytest.approx((0.44 - 0.40) / median * 100)
    assert s.gbps == pytest.approx(NBYTES / median / 1e9)
    assert s.stable


def test_failed_and_unverified_runs_are_counted_not_sampled():
    runs = [
        make_run(0, 0.30), make_run(1, 0.32),
        make_run(2, None, error="WorkerFailed: exit 1"),
        make_run(3, 0.01, verified=False),  # wrong bytes: its fast time must not count
        make_run(4, 0.31, verified=None),  # not checked: still a sample
    ]
    s = summarize(runs, NBYTES)
    assert (s.n, s.n_failed) == (3, 2)
    assert s.min_s == 0.30 and s.median_s == pytest.approx(0.31)


def test_no_successful_run_gives_empty_stats():
    s = summarize([make_run(0, None, error="boom"), make_run(1, 0.1, verified=False)], NBYTES)
    assert s == AttemptStats(0, 2, None, None, None, None, None, stable=False)


def test_unstable_spread_warns_and_names_the_outlier_run():
    runs = [make_run(i, t) for i, t in enumerate([0.10, 0.10, 0.13])]
    s = summarize(runs, NBYTES)
    assert not s.stable
    warning = stability_warning(s, runs)
    assert warning is not None and "30.0 %" in warning and "\n" not in warning
    assert "the outlier is run 3/3 (position 2 in the run order) at 130.0 ms against a median of 100.0 ms" in warning
    assert stability_warning(stats_of([0.100, 0.101, 0.102])) is None


def test_the_outlier_is_the_run_farthest_from_the_median_by_ratio():
    runs = [make_run(i, t) for i, t in enumerate([0.10, 0.04, 0.11, None, 0.10])]
    warning = stability_warning(summarize(runs, NBYTES), runs)
    assert "run 2/5 (position 1 in the run order) at 40.0 ms" in warning  # 2.5× fast beats 1.1× slow


def test_one_run_has_no_spread_and_is_never_stable():
    s = stats_of([0.1])
    assert s.spread_pct is None and not s.stable and s.n == 1
    assert "one run" in stability_warning(s)
