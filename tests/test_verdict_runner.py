"""The verdict rule wired into the runner (issue 9): rounds paired, the order counterbalanced, the
interval and its reason stored, the outlier named — driven by scripted runs, no worker spawned."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from workbench.ledger import Ledger
from workbench.measure.run.runner import measure_with
from workbench.measure.run.spawn import Outcome
from workbench.records import RunConfig


@pytest.fixture
def file(tmp_path: Path, isolated_cache: Path) -> str:
    path = tmp_path / "m.bin"
    path.write_bytes(b"\0" * 4096)
    return str(path)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def scripted(times: Callable[[int, RunConfig], float]) -> Callable[[RunConfig], Outcome]:
    """A run function whose k-th call (over the whole comparison) takes ``times(k, config)`` seconds."""
    calls = iter(range(10**6))

    def run(config: RunConfig) -> Outcome:
        t = times(next(calls), config)
        return Outcome(pid=1, load_s=t, wall_s=t + 0.1, bytes=4096, verified=True)
    return run


def drifting(seed: int, steps: int, drift: float = 0.3, noise: float = 0.01) -> Callable[[int, RunConfig], float]:
    """The same configuration every time, slowing down steadily by ``drift`` over ``steps`` runs."""
    rng = np.random.default_rng(seed)
    return lambda k, _c: (1 + drift * k / (steps - 1)) * float(np.exp(rng.normal(0, noise)))


def false_calls(file: str, ledger: Ledger, trials: int, **order: str) -> int:
    configs = [RunConfig(file, "pread", label="A"), RunConfig(file, "pread", label="B")]
    calls = 0
    for trial in range(trials):
        results = measure_with(scripted(drifting(trial, 12)), configs, runs=6, cache="asis", ledger=ledger,
                               campaign=f"drift-{trial}", lock_dir=str(Path(ledger.path).parent / "locks"), **order)
        calls += results[1].verdict != "inconclusive"
    return calls


def test_identical_configs_under_drift_are_inconclusive_with_the_default_order(file, ledger) -> None:
    # 30 % drift over the comparison, 1 % noise, 6 paired rounds: abba (the default) cancels the drift
    assert false_calls(file, ledger, 25) == 0
    # with A B A B the drift is a constant bias that the pairs make "significant" (why abba is default)
    assert false_calls(file, ledger, 25, order="abab") >= 8


def test_paired_rounds_store_the_interval_and_reason(file, ledger) -> None:
    configs = [RunConfig(file, "pread", label="base"), RunConfig(file, "mmap", label="fast")]
    rng = np.random.default_rng(1)
    times = scripted(lambda k, c: (1.0 if c.strategy == "pread" else 0.8) * float(np.exp(rng.normal(0, 0.02))))
    base, fast = measure_with(times, configs, runs=6, cache="asis", ledger=ledger,
                              lock_dir=str(Path(ledger.path).parent / "locks"))
    assert base.verdict == "baseline" and fast.verdict == "faster"
    assert fast.verdict_reason == "interval excludes 1 (paired rounds)"
    assert fast.ci_low < fast.speedup < fast.ci_high and 1 < fast.ci_low
    stored = ledger.attempt(fast.attempt_id)
    assert (stored["ci_low"], stored["ci_high"], stored["verdict_reason"]) == (
        fast.ci_low, fast.ci_high, fast.verdict_reason)
    data = fast.to_json()
    assert {k: data[k] for k in ("speedup", "ci_low", "ci_high", "verdict", "verdict_reason")} == {
        "speedup": fast.speedup, "ci_low": fast.ci_low, "ci_high": fast.ci_high, "verdict": "faster",
        "verdict_reason": fast.verdict_reason}
    assert fast.effect.startswith(f"{fast.speedup:.2f}× [")


def test_a_ledger_baseline_is_compared_unpaired(file, ledger) -> None:
    locks = str(Path(ledger.path).parent / "locks")
    (base,) = measure_with(scripted(lambda k, c: 1.0 + 0.01 * (k % 3)), [RunConfig(file, "pread")], runs=6,
                           cache="asis", ledger=ledger, lock_dir=locks)
    (slow,) = measure_with(scripted(lambda k, c: 4.0 + 0.01 * (k % 3)), [RunConfig(file, "mmap")], runs=6,
                           cache="asis", ledger=ledger, lock_dir=locks, baseline=base.attempt_id)
    assert slow.verdict == "slower" and slow.verdict_reason == "interval excludes 1 (independent runs)"


def test_the_minimum_effect_is_a_parameter(file, ledger) -> None:
    locks = str(Path(ledger.path).parent / "locks")
    configs = [RunConfig(file, "pread"), RunConfig(file, "mmap")]
    times = lambda k, c: (1.0 if c.strategy == "pread" else 0.99) * (1 + 0.001 * (k % 4))  # noqa: E731
    _, small = measure_with(scripted(times), configs, runs=6, cache="asis", ledger=ledger, lock_dir=locks)
    assert small.verdict == "inconclusive" and "2% minimum" in small.verdict_reason
    _, small = measure_with(scripted(times), configs, runs=6, cache="asis", ledger=ledger, lock_dir=locks,
                            min_effect=0.005)
    assert small.verdict == "faster"


def test_one_slow_run_is_named_and_does_not_erase_a_large_effect(file, ledger) -> None:
    locks = str(Path(ledger.path).parent / "locks")
    configs = [RunConfig(file, "pread"), RunConfig(file, "odirect")]

    def times(k: int, c: RunConfig) -> float:
        if c.strategy == "pread":
            return 0.058 + 0.001 * (k % 3)
        return 0.900 if k == 6 else 0.250 + 0.005 * (k % 4)  # one slow run, 4× slower anyway
    base, slow = measure_with(scripted(times), configs, runs=5, cache="asis", ledger=ledger, lock_dir=locks)
    assert slow.verdict == "slower" and slow.ci_high < 1
    # abba with 2 configs: positions 0 1 | 3 2 | 4 5 | 7 6 | 8 9; call 6 is odirect's 4th run
    assert slow.warning is not None and "outlier is run 4/5 (position 6 in the run order) at 900.0 ms" in slow.warning
    assert base.warning is None
