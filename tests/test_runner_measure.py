"""The runner end to end: fresh worker per run, cache state per run, interleaving, failures, ledger."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from workbench.io.envinfo import eviction_support
from workbench.errors import WorkerFailed
from workbench.ledger import Ledger
from workbench.errors import BaselineMismatch, WorkbenchError
from workbench.measure import RunConfig, interleave, measure
from workbench.measure.run.runner import measure_with
from workbench.measure.run.spawn import run_worker
from workbench.measure.run.attempt import ATTEMPT_KEYS, RUN_KEYS


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from workbench.formats.synth import write_synthetic

    path = tmp_path_factory.mktemp("runner") / "dense.gguf"
    write_synthetic(path, format="gguf", layout="dense", size=1 << 20, seed=3)
    return str(path)


@pytest.fixture
def ledger(tmp_path: Path, isolated_cache: Path) -> Ledger:
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


@pytest.fixture
def locks(tmp_path: Path) -> str:
    return str(tmp_path / "locks")


def test_interleave_abab_cycles_configs() -> None:
    assert interleave(3, 2, "abab") == [0, 1, 2, 0, 1, 2]


def test_interleave_abba_alternates_each_round_and_is_the_default() -> None:
    assert interleave(3, 3, "abba") == [0, 1, 2, 2, 1, 0, 0, 1, 2]
    assert interleave(2, 4) == [0, 1, 1, 0, 0, 1, 1, 0]


def test_interleave_shuffle_is_seeded_and_complete() -> None:
    a, b, c = interleave(2, 6, "shuffle", seed=1), interleave(2, 6, "shuffle", seed=1), interleave(2, 6, "shuffle", seed=2)
    assert a == b
    assert sorted(a) == [0] * 6 + [1] * 6
    assert a != c and a != interleave(2, 6, "abab")
    assert all(sorted(a[k:k + 2]) == [0, 1] for k in range(0, 12, 2))  # round k: the k-th run of each
    with pytest.raises(ValueError):
        interleave(2, 2, "zigzag")


def test_runs_are_fresh_processes_interleaved_and_cold(model: str, ledger: Ledger, locks: str) -> None:
    configs = [RunConfig(model, "pread", {"evict": "1"}), RunConfig(model, "mmap")]
    results = measure(configs, runs=2, cache="cold", ledger=ledger, campaign="t", lock_dir=locks)
    runs = [r for res in results for r in res.runs]
    pids = [r.pid for r in runs]
    assert len(set(pids)) == 4 and os.getpid() not in pids
    assert sorted(r.position for r in runs) == [0, 1, 2, 3]
    assert [r.position for r in results[0].runs] == [0, 3]  # A B, B A
    assert all(r.ok and r.verified for r in runs), [r.error for r in runs]
    assert all(r.wall_s > r.load_s > 0 for r in runs)
    if eviction_support(os.path.dirname(model)):
        assert all(r.cache_reached and r.resident_before <= 0.02 for r in runs)
        assert [res.cache for res in results] == ["cold", "cold"]
    else:  # a file system that cannot drop pages must never be labelled cold
        assert all(not r.cache_reached for r in runs) and results[0].cache.startswith("asis(unreachable")
    assert results[0].verdict == "baseline" and results[0].baseline_id is None
    assert results[1].baseline_id == results[0].attempt_id
    assert results[1].verdict in ("faster", "slower", "inconclusive")
    stored = ledger.runs(campaign="t")
    assert len(stored) == 4 and set(stored["pid"]) == set(pids)
    assert ledger.attempt(results[1].attempt_id)["verdict"] == results[1].verdict


def test_warm_runs_start_resident_and_json_has_the_issue_keys(model: str, ledger: Ledger, locks: str) -> None:
    (res,) = measure([RunConfig(model, "pread")], runs=2, cache="warm", ledger=ledger, lock_dir=locks)
    assert all(r.cache_reached and r.resident_before >= 0.98 for r in res.runs)
    data = res.to_json()
    assert list(data)[: len(ATTEMPT_KEYS)] == list(ATTEMPT_KEYS)
    assert data["n"] == 2 and data["cache"] == "warm" and data["strategy"] == "pread"
    assert all(list(run)[: len(RUN_KEYS)] == list(RUN_KEYS) for run in data["runs"])
    assert data["gbps"] == pytest.approx(res.runs[0].bytes / data["median_s"] / 1e9)


def test_failed_worker_is_recorded_and_the_others_go_on(model: str, ledger: Ledger, locks: str,
                                                         tmp_path: Path) -> None:
    # measure_with skips measure()'s preflight, so the workers themselves meet the bad config
    configs = [RunConfig(model, "pread"), RunConfig(model, "pread", {"no_such_param": "1"}),
               RunConfig(str(tmp_path / "missing.gguf"), "pread")]
    results = measure_with(run_worker, configs, runs=2, cache="asis", ledger=ledger, lock_dir=locks)
    good, bad, missing = results
    assert good.stats.n == 2 and good.verdict == "baseline"
    for res, text in ((bad, "no_such_param"), (missing, "missing.gguf")):
        assert res.verdict == "failed" and res.stats.n == 0 and res.stats.n_failed == 2
        assert all(r.error and text in r.error and r.load_s is None for r in res.runs)
        assert all(r.pid for r in res.runs)  # the worker did start: its failure is its own
    stored = ledger.runs(bad.attempt_id)
    assert len(stored) == 2 and stored["error"].str.contains("no_such_param").all()


@pytest.mark.parametrize("config, text", [
    (lambda m, t: RunConfig(m, "pread", {"no_such_param": "1"}), "no_such_param"),
    (lambda m, t: RunConfig(str(t / "missing.gguf"), "pread"), "missing.gguf"),
    (lambda m, t: RunConfig(m, "no-such-strategy"), "no-such-strategy"),
    (lambda m, t: RunConfig(m, "pread", device="hip"), "hip"),
])
def test_preflight_refuses_before_anything_is_recorded(model: str, ledger: Ledger, locks: str,
                                                       tmp_path: Path, config, text: str) -> None:
    with pytest.raises(WorkbenchError, match=text):
        measure([RunConfig(model, "pread"), config(model, tmp_path)], runs=2, cache="asis",
                ledger=ledger, lock_dir=locks)
    assert ledger.attempts().empty and ledger.runs().empty


def test_worker_timeout_is_a_failed_run(model: str, ledger: Ledger, locks: str) -> None:
    (res,) = measure([RunConfig(model, "pread")], runs=1, cache="asis", ledger=ledger, lock_dir=locks,
                     timeout_s=0.001)
    assert res.verdict == "failed" and "timed out" in res.runs[0].error


def test_baseline_attempt_from_the_ledger(model: str, ledger: Ledger, locks: str) -> None:
    (first,) = measure([RunConfig(model, "pread")], runs=2, cache="warm", ledger=ledger, lock_dir=locks)
    (second,) = measure([RunConfig(model, "mmap")], runs=2, cache="warm", ledger=ledger, lock_dir=locks,
                        baseline=first.attempt_id[:8])
    assert second.baseline_id == first.attempt_id
    assert second.verdict in ("faster", "slower", "inconclusive")
    assert second.speedup == pytest.approx(first.stats.median_s / second.stats.median_s)
    assert second.verdict_reason == "n < 3" and second.ci_low is None  # two runs: no interval
    assert "differs" not in (second.notes or "")
    # a baseline from another cache state is refused before anything is recorded (issue 33), and
    # compared only when asked, saying ACROSS and what differs
    before = len(ledger.attempts())
    with pytest.raises(BaselineMismatch, match=f"baseline {first.attempt_id[:8]} is warm, not cold"):
        measure([RunConfig(model, "mmap")], runs=2, cache="cold", ledger=ledger, lock_dir=locks,
                baseline=first.attempt_id)
    assert len(ledger.attempts()) == before
    (third,) = measure([RunConfig(model, "mmap")], runs=2, cache="cold", ledger=ledger, lock_dir=locks,
                       baseline=first.attempt_id, baseline_across=True)
    assert f"ACROSS: baseline {first.attempt_id[:8]} is warm, not cold" in third.notes
    assert "ACROSS" in ledger.attempt(third.attempt_id)["notes"]


def test_unreachable_cold_state_is_not_labelled_cold(ledger: Ledger, locks: str) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or eviction_support(shm):
        pytest.skip("needs a memory file system at /dev/shm")
    from workbench.formats.synth import write_synthetic

    path = shm / f"wb-runner-test-{os.getpid()}.gguf"
    write_synthetic(path, format="gguf", layout="dense", size=256 << 10)
    try:
        (res,) = measure([RunConfig(str(path), "pread")], runs=1, cache="cold", ledger=ledger,
                         lock_dir=locks)
    finally:
        path.unlink()
    run = res.runs[0]
    assert run.ok and not run.cache_reached and "tmpfs" in run.report.cache_error
    assert res.cache.startswith("asis(unreachable: cold")
    assert ledger.attempt(res.attempt_id)["cache"].startswith("asis(unreachable: cold")


def test_interrupted_measurement_keeps_its_runs(model: str, ledger: Ledger, locks: str) -> None:
    def stop(done: int, total: int, config: RunConfig, run: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as err:
        measure([RunConfig(model, "pread"), RunConfig(model, "mmap")], runs=2, cache="asis",
                ledger=ledger, campaign="cut", lock_dir=locks, progress=stop)
    (attempt,) = ledger.attempts("cut").to_dict("records")  # only the first config had started
    assert attempt["verdict"] == "failed" and "interrupted after 1/4 runs" in attempt["notes"]
    assert attempt["verdict_reason"] == "interrupted"
    # what the CLI tells the user: what was kept, and where
    assert (err.value.done, err.value.total, err.value.attempt_ids) == (1, 4, [attempt["id"]])
    assert len(ledger.runs(attempt["id"])) == 1


def test_verdict_rules() -> None:
    from workbench.measure.run.attempt import decide
    from workbench.records import RunRecord

    def run(load: float | None, verified: bool | None = True, error: str | None = None) -> RunRecord:
        return RunRecord(0, 1, load, 1.0, 10, 0.0, "cold", True, verified, error=error)

    base = [run(t) for t in (1.0, 0.95, 1.05, 1.0, 1.02)]
    fast = [run(t) for t in (0.5, 0.49, 0.51, 0.5, 0.52)]
    failed = [run(None, None, "boom")] * 3

    def verdict(runs, base_runs, is_baseline=False):
        return decide(runs, base_runs, is_baseline=is_baseline, paired=True, min_effect=0.02)

    assert verdict(base, base, is_baseline=True).verdict == "baseline"
    d = verdict(fast, base)
    assert (d.verdict, d.speedup) == ("faster", pytest.approx(2.0)) and d.ci_low > 1.5 and d.ci_high < 2.5
    assert d.reason == "interval excludes 1 (independent runs)"  # 5 rounds: not yet paired
    assert verdict(fast, failed).verdict == "inconclusive"  # baseline failed
    assert verdict(fast[:2], base).reason == "n < 3"
    d = verdict(fast + [run(None, None, "boom")], base)
    assert d.verdict == "failed" and "1/6 runs failed" in d.reason
    d = verdict(fast + [run(0.5, verified=False)], base)
    assert d.verdict == "failed" and "wrong bytes" in d.note


def test_rounds_are_paired_only_where_both_runs_count() -> None:
    from workbench.measure.run.attempt import compare_runs
    from workbench.records import RunRecord

    def run(load: float | None) -> RunRecord:
        return RunRecord(0, 1, load, 1.0, 10, 0.0, "cold", True, True, error=None if load else "boom")

    base = [run(t) for t in (1.0, 1.1, None, 1.2, 1.3, 1.4, 1.5, 1.6)]
    new = [run(t) for t in (0.5, 0.55, 0.6, None, 0.65, 0.7, 0.75, 0.8)]
    effect = compare_runs(base, new, paired=True, min_effect=0.02)
    assert effect.method == "paired rounds" and effect.verdict == "faster"
    assert effect.speedup == pytest.approx(1.35 / 0.675)  # rounds 3 and 4 dropped from both sides


def test_a_failing_worker_raises_worker_failed_and_is_recorded(tmp_path: Path, ledger: Ledger, locks: str) -> None:
    missing = RunConfig(str(tmp_path / "gone.gguf"), "pread")
    with pytest.raises(WorkerFailed) as err:
        run_worker(missing)
    assert err.value.returncode == 2 and err.value.pid and err.value.wall_s > 0
    assert str(err.value).startswith("worker exit 2:") and "gone.gguf" in str(err.value)
    (res,) = measure_with(run_worker, [missing], runs=1, cache="asis", ledger=ledger, lock_dir=locks)
    run = res.runs[0]
    assert res.verdict == "failed" and run.error == str(err.value)  # the same one line, recorded
    assert run.pid and run.wall_s and run.load_s is None
