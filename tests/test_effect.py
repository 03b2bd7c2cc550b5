"""The verdict rule: ratio of medians, seeded bootstrap interval, minimum effect (issue 9)."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.measure.run.effect import MIN_PAIRED_ROUNDS, expanded_alpha, ratio_effect
from workbench.records import format_effect


def test_expanded_alpha_is_hesterbergs_small_sample_tail() -> None:
    assert expanded_alpha(5) == pytest.approx(0.0019, abs=3e-4)  # 2Φ(−√(5/4)·2.776)
    assert expanded_alpha(3) < expanded_alpha(5) < expanded_alpha(10) < 0.05
    assert 0.045 < expanded_alpha(200) < 0.05  # tends to α for many runs


def test_four_times_slower_with_one_outlier_run_is_slower() -> None:
    # the demo's odirect-vs-pread case: ranges far apart, one slow run in each attempt
    base = [0.058, 0.056, 0.060, 0.0716, 0.059]
    cand = [0.264, 0.210, 0.280, 0.250, 0.900]
    effect = ratio_effect(base, cand)
    assert effect.verdict == "slower" and effect.ci_high < 1 and effect.reason == "interval excludes 1"
    assert ratio_effect([0.058, 0.0716, 0.060], [0.264, 0.210, 0.900]).verdict == "slower"


@pytest.mark.parametrize("n, paired", [(5, False), (8, True)])
def test_identical_distributions_are_inconclusive_in_95_percent_of_seeded_trials(n: int, paired: bool) -> None:
    rng = np.random.default_rng(123)
    calls = 0
    for trial in range(400):
        a, b = np.exp(rng.normal(0, 0.1, n)), np.exp(rng.normal(0, 0.1, n))
        calls += ratio_effect(a, b, paired=paired, seed=trial).verdict != "inconclusive"
    assert calls / 400 <= 0.05


def test_tiny_consistent_effect_below_the_minimum_is_inconclusive() -> None:
    a = np.array([1.0, 1.001, 0.999, 1.0005, 0.9995])
    effect = ratio_effect(a, a * 1.01)  # 1 % slower, every run
    assert effect.ci_high < 1 and effect.verdict == "inconclusive" and "minimum" in effect.reason
    assert ratio_effect(a, a * 1.01, min_effect=0.005).verdict == "slower"


def test_fewer_than_three_runs_give_no_interval() -> None:
    effect = ratio_effect([1.0, 1.1], [2.0, 2.1])
    assert (effect.verdict, effect.reason, effect.ci_low, effect.ci_high) == ("inconclusive", "n < 3", None, None)
    assert effect.speedup == pytest.approx(1.05 / 2.05)
    assert ratio_effect([], [1.0]).speedup is None


def test_pairing_starts_at_six_rounds_and_cancels_drift() -> None:
    rng = np.random.default_rng(5)
    rounds = MIN_PAIRED_ROUNDS + 2
    drift = np.exp(np.linspace(0, 0.6, rounds))  # both configs slow down together, 80 % over the run
    base = drift * np.exp(rng.normal(0, 0.01, rounds))
    cand = drift * np.exp(rng.normal(0, 0.01, rounds)) / 1.10
    paired, unpaired = ratio_effect(base, cand, paired=True), ratio_effect(base, cand)
    assert paired.method == "paired rounds" and unpaired.method == "independent runs"
    assert paired.verdict == "faster"  # the 10 % win shows through the drift
    assert unpaired.verdict == "inconclusive"  # drift swamps it when rounds are not kept together
    assert ratio_effect(base[:5], cand[:5], paired=True).method == "independent runs"


def test_seeded_and_reproducible() -> None:
    a, b = [1, 1.2, 1.1, 0.9, 1.05], [0.9, 1.0, 0.95, 0.85, 0.99]
    assert ratio_effect(a, b) == ratio_effect(a, b)


def test_one_format_for_faster_and_slower() -> None:
    assert format_effect(1.14, 1.05, 1.22) == "1.14× [1.05–1.22]"
    assert format_effect(0.81, 0.77, 0.86) == "0.81× [0.77–0.86]"
    assert format_effect(1.5) == "1.50×" and format_effect(None) == "—"
    assert format_effect(float("nan"), 1.0, 2.0) == "—"
    assert str(ratio_effect([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])).startswith("0.50× [")


def test_zero_or_non_finite_times_give_no_ratio() -> None:
    for base, cand in (([0.0, 0.0, 0.0], [1.0, 1.1, 0.9]), ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]),
                       ([1.0, float("inf"), 1.0], [1.0, 1.0, 1.0])):
        effect = ratio_effect(base, cand)
        assert (effect.speedup, effect.verdict) == (None, "inconclusive") and "zero" in effect.reason
