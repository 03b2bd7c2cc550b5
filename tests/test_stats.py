"""summarize / judge / stability_warning: the numbers and the noise-aware verdict."""
from __future__ import annotations

import statistics

import pytest

from ledger_helpers import NBYTES, make_run
from workbench.records import AttemptStats
from workbench.measure.stats import judge, stability_warning, summarize


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


def test_unstable_spread_warns():
    s = stats_of([0.10, 0.10, 0.13])
    assert not s.stable
    warning = stability_warning(s)
    assert warning is not None and "30.0 %" in warning and "\n" not in warning
    assert stability_warning(stats_of([0.100, 0.101, 0.102])) is None


def test_judge_faster_outside_spread():
    speedup, verdict = judge(stats_of([1.00, 1.02, 0.99]), stats_of([0.50, 0.51, 0.52]))
    assert verdict == "faster"
    assert speedup == pytest.approx(1.00 / 0.51)


def test_judge_slower_outside_spread():
    speedup, verdict = judge(stats_of([0.50, 0.51, 0.52]), stats_of([1.00, 1.02, 0.99]))
    assert verdict == "slower" and speedup < 1


def test_judge_inconclusive_inside_spread():
    # medians differ by 0.05 s, but the baseline itself swings by 0.2 s run to run
    base = stats_of([0.90, 1.00, 1.10])
    new = stats_of([0.94, 0.95, 0.96])
    speedup, verdict = judge(base, new)
    assert verdict == "inconclusive"
    assert speedup == pytest.approx(1.00 / 0.95)


def test_judge_uses_the_larger_spread_of_the_two():
    # the new attempt is the noisy one: its own spread swallows the difference
    assert judge(stats_of([1.00, 1.00, 1.01]), stats_of([0.70, 0.90, 1.20]))[1] == "inconclusive"
    # difference exactly equal to the spread is still not a win
    assert judge(stats_of([1.0, 1.0, 1.0]), stats_of([0.5, 0.5, 1.0]))[1] == "inconclusive"


def test_judge_failed_and_unmeasured():
    ok = stats_of([0.5, 0.5, 0.6])
    failed = summarize([make_run(0, None, error="x")], NBYTES)
    assert judge(ok, failed) == (None, "failed")
    assert judge(failed, ok) == (None, "inconclusive")
    # a single run measures no spread: never a win
    assert judge(ok, stats_of([0.1]))[1] == "inconclusive"
