"""Real records for the ledger and stats tests (shared by tests/test_ledger_*.py and test_stats.py)."""
from __future__ import annotations

from pathlib import Path

from workbench.ledger import Ledger
from workbench.records import (
    AttemptStats, Engaged, LoadSummary, RunConfig, RunRecord, Timings, VerifySummary, WorkerReport,
)
from workbench.measure.run.attempt import decide
from workbench.measure.run.stats import summarize

NBYTES = 3 << 20


def make_run(position: int, load_s: float | None, *, error: str | None = None, verified: bool | None = True,
             pid: int | None = None, cache_reached: bool = True) -> RunRecord:
    """One run as the runner would record it."""
    return RunRecord(
        position=position, pid=pid if pid is not None else 1000 + position, load_s=load_s,
        wall_s=None if load_s is None else load_s + 0.3, bytes=NBYTES if error is None else 0,
        resident_before=0.0, cache_state="cold", cache_reached=cache_reached, verified=verified,
        engaged=("zero_copy: 3/3 tensors — ON",), phases={"read": 0.01, "upload": 0.002},
        minflt=10 + position, majflt=position, lock_wait_s=0.001, error=error,
        report=make_report(position, load_s, verified, cache_reached),
    )


def make_report(position: int, load_s: float | None, verified: bool | None, cache_reached: bool) -> WorkerReport:
    """What a worker (or, for a failed run, only the runner) reported about one run."""
    cache_error = None if cache_reached else "the page cache stayed warm"
    if load_s is None:
        return WorkerReport(cache_error=cache_error)
    load = LoadSummary(
        strategy="mmap", params={"evict": None, "gate": None}, device="host", bytes=NBYTES, n_tensors=3,
        load_s=load_s - 0.001, gbps=NBYTES / load_s / 1e9, phases={"read": 0.01, "upload": 0.002, "index": 0.001},
        minflt=10 + position, majflt=position, evict=False, evict_source="device-discrete",
        engaged=(Engaged("zero_copy", 3, 3),))
    verify = None if verified is None else VerifySummary(verified, 3, 3, 0 if verified else 1,
                                                          None if verified else "blk.0.w")
    return WorkerReport(
        pid=1000 + position, device_info={"backend": "host", "name": "host memory"}, file="/models/tiny.gguf",
        strategy="mmap", device="host", load_s=load_s, init_s=0.002, index_s=0.001, verify_s=0.004, load=load,
        verified=verified, verify=verify, resident_after=1.0, cache_error=cache_error,
        timings=Timings(0.05, 0.1, 0.002, load_s, 0.004, 0.2 + load_s, ("gguf",)))


def record_attempt(led: Ledger, strategy: str, times: list[float | None], *, campaign: str = "c",
                   baseline: tuple[str, list[RunRecord]] | None = None, host: str = "rig-a",
                   file: str = "/models/tiny.gguf", environment: dict | None = None) -> tuple[str, list[RunRecord]]:
    """Start, fill and finish one attempt the way the runner does (rounds paired with the
    baseline's); returns (id, runs)."""
    config = RunConfig(file=file, strategy=strategy, params={"threads": 4})
    attempt_id = led.start_attempt(
        campaign=campaign, config=config, cache="cold", hypothesis=f"{strategy} helps",
        file_identity={"path": file, "size": NBYTES, "hash": "xxh3_128:0123456789abcdef0123"},
        environment=environment or {"host": host, "kernel": "6.8"}, device_info={"name": "host memory", "backend": "host"},
        host=host,
    )
    runs = [make_run(i, t, error=None if t is not None else "WorkerFailed: exit 1") for i, t in enumerate(times)]
    for run in runs:
        led.add_run(attempt_id, run)
    stats = summarize(runs, NBYTES)
    if baseline is None:
        led.finish_attempt(attempt_id, stats, baseline_id=None, speedup=None, verdict="baseline")
    else:
        d = decide(runs, baseline[1], is_baseline=False, paired=True, min_effect=0.02)
        led.finish_attempt(attempt_id, stats, baseline_id=baseline[0], speedup=d.speedup, verdict=d.verdict,
                           ci=(d.ci_low, d.ci_high), verdict_reason=d.reason)
    return attempt_id, runs


def fill_ledger(path: Path, host: str = "rig-a") -> tuple[str, str, str]:
    """A ledger with a baseline, a faster attempt and a failed one; returns their ids."""
    with Ledger(path) as led:
        base = record_attempt(led, "pread", [0.50, 0.52, 0.51, 0.53, 0.50], host=host)
        fast = record_attempt(led, "mmap", [0.20, 0.21, 0.20, 0.22, 0.20], baseline=base, host=host)
        failed = record_attempt(led, "odirect", [None, None, None], baseline=base, host=host)
    return base[0], fast[0], failed[0]
