"""The runner: fresh worker per run, cache state set and checked before each, configs interleaved,
every run written to the ledger as it finishes, verdicts against a baseline, ceilings attached.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.errors import (
    MeasurementInterrupted, WorkbenchError, WorkerFailed,
)
from workbench.measure.run.attempt import (
    AttemptResult,
)
from workbench.measure.run.baseline import check_baseline
from workbench.measure.run.effect import DEFAULT_MIN_EFFECT
from workbench.measure.lock.device import DeviceLock
from workbench.measure.run.model import (  # noqa: F401 - recorded_identity: imported from here too
    Models, cache_request, identity_members, model_directory, prepare_cache, recorded_identity,
)
from workbench.measure.run.order import DEFAULT_ORDER, interleave
from workbench.records import (
    CACHE_STATES, RunConfig, RunRecord,
)
from workbench.measure.run.spawn import Outcome, run_worker
from workbench.measure.run.measurement import Session

if TYPE_CHECKING:
    from workbench.formats.index import TensorIndex
    from workbench.ledger import Ledger
    from workbench.measure.run.model import Model

    # what ``ledger=`` accepts everywhere in measure/: an open Ledger, a path, or None (the default)
    LedgerArg = Ledger | str | os.PathLike[str] | None

RunFn = Callable[[RunConfig], Outcome]
Progress = Callable[[int, int, RunConfig, RunRecord], None]


def measure(configs: Sequence[RunConfig], *, runs: int = 5, cache: str = "cold", order: str = DEFAULT_ORDER,
            seed: int = 0, ledger: LedgerArg = None, campaign: str = "default", hypothesis: str = "",
            labels: Sequence[str] | None = None, baseline: str | None = None, verify: bool = True,
            timeout_s: float = 600.0, progress: Progress | None = None,
            lock_dir: str | os.PathLike[str] | None = None,
            min_effect: float = DEFAULT_MIN_EFFECT, baseline_across: bool = False) -> list[AttemptResult]:
    """Measure ``configs`` interleaved, one fresh ``python -m workbench.measure.run.worker`` per run.

    Parameters
    ----------
    configs
        What to measure; the first is the baseline unless ``baseline`` names a ledger attempt.
    runs, cache, order, seed
        Runs per config (≥ 5 for a claim), page-cache state before each run (cold/warm/asis), and
        the order inside each round: ``abba`` (alternating direction, the default), ``abab`` or a
        ``shuffle`` seeded by ``seed``.
    ledger
        A ``Ledger``, a path, or None for the default ledger (``$WORKBENCH_LEDGER`` or data/).
    verify
        Read the device bytes back after the timed window and compare them with the file.
    timeout_s
        Per-run limit; a worker past it is killed and its run recorded as failed.
    progress
        Called after each run with (done, total, config, run).
    lock_dir
        Where the per-device lock files live (default ``$WORKBENCH_LOCK_DIR`` or /tmp/workbench-locks).
    min_effect
        The smallest speedup or slowdown worth a verdict (0.02: 2 %); README "Measuring honestly".
    baseline_across
        Hold the configs to a ledger ``baseline`` of another model, cache state or device anyway
        (refused otherwise, before anything is recorded); every ratio then says ACROSS and what differs.

    Every config is compared with the baseline by the ratio of medians and its bootstrap interval,
    pairing the rounds of this call (round k = the k-th run of each config); a ``baseline`` from the
    ledger ran at another time, so its runs are not paired.
    """
    preflight(configs)
    models = Models()  # each worker verifies against the identity its attempt recorded (issue 35 §4)
    run_fn = functools.partial(run_worker, verify=verify, timeout_s=timeout_s, cache=cache_request(cache),
                               identity_of=models.identity)
    return measure_with(run_fn, configs, runs=runs, cache=cache, order=order, seed=seed,
                        ledger=ledger, campaign=campaign, hypothesis=hypothesis, labels=labels,
                        baseline=baseline, progress=progress, lock_dir=lock_dir, min_effect=min_effect,
                        baseline_across=baseline_across, models=models)


def measure_with(run_fn: RunFn, configs: Sequence[RunConfig], *, runs: int = 5, cache: str = "cold",
                 order: str = DEFAULT_ORDER, seed: int = 0, ledger: LedgerArg = None,
                 campaign: str = "default", hypothesis: str = "", labels: Sequence[str] | None = None,
                 baseline: str | None = None, progress: Progress | None = None,
                 lock_dir: str | os.PathLike[str] | None = None,
                 min_effect: float = DEFAULT_MIN_EFFECT, baseline_across: bool = False,
                 models: Models | None = None) -> list[AttemptResult]:
    """:func:`measure` with any way of doing one run (a worker, an external engine)."""
    if not configs:
        raise WorkbenchError("nothing to measure: no configurations given")
    if cache not in CACHE_STATES:
        raise WorkbenchError(f"unknown cache state {cache!r}; known: {', '.join(CACHE_STATES)}")
    if labels is not None and len(labels) != len(configs):
        raise WorkbenchError(f"{len(labels)} labels for {len(configs)} configurations")
    if not 0 <= min_effect < 1:
        raise WorkbenchError(f"minimum effect {min_effect!r} must be a fraction in [0, 1), e.g. 0.02 for 2 %")
    try:
        sequence = interleave(len(configs), runs, order, seed)
    except ValueError as exc:
        raise WorkbenchError(str(exc)) from None
    for device in dict.fromkeys(c.device for c in configs):  # an unsafe lock is one line before anything
        DeviceLock(device, lock_dir).check()
    store = open_ledger(ledger)
    try:
        return _measure_runs(run_fn, configs, sequence, store, labels=labels, campaign=campaign,
                             hypothesis=hypothesis, cache=cache, baseline=baseline, progress=progress,
                             lock_dir=lock_dir, min_effect=min_effect, baseline_across=baseline_across,
                             models=models)
    finally:
        if store is not ledger:  # opened here, so closed here
            store.close()


def _measure_runs(run_fn: RunFn, configs: Sequence[RunConfig], sequence: list[int], store: Ledger, *,
                  labels: Sequence[str] | None, campaign: str, hypothesis: str, cache: str,
                  baseline: str | None, progress: Progress | None,
                  lock_dir: str | os.PathLike[str] | None, min_effect: float,
                  baseline_across: bool = False, models: Models | None = None) -> list[AttemptResult]:
    models, across, base_runs = models if models is not None else Models(), "", None
    if baseline:
        baseline = store.resolve_id(baseline)  # a prefix is fine; a wrong one fails before any run
        # another model, state or device: refused here, before anything (the campaign too) is written
        across = check_baseline(store, baseline, configs, [cache], models, across=baseline_across)
        base_runs = store.run_records(baseline)
    session = Session(store, list(configs), labels, campaign, hypothesis, cache, min_effect, models)
    session.across = across
    try:
        for position, i in enumerate(sequence):
            session.open(i)  # before its first run: a runner killed during that run leaves it, interrupted
            record = _timed_run(run_fn, configs[i], position, cache, lock_dir, session.model(configs[i].file))
            session.add(i, record)
            if progress is not None:
                progress(position + 1, len(sequence), configs[i], record)
    except BaseException as exc:
        done = sum(map(len, session.runs))
        ids = session.abandon(f"interrupted after {done}/{len(sequence)} runs")
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, MeasurementInterrupted):
            raise MeasurementInterrupted(done, len(sequence), ids) from exc
        raise
    results = session.finish(baseline, base_runs)
    if session.lost is not None:  # every number was kept in memory: save them, then say so
        raise session.unrecorded(results)
    return results


def preflight(configs: Sequence[RunConfig]) -> dict[str, TensorIndex]:
    """Fail in one line, before any attempt is opened, on what no run could survive: a strategy or
    parameter that does not parse, a backend that is not here, a model that is missing or malformed
    (any file of a set) or has more files than the descriptor limit lets a load hold open. Returns the
    index of each model.

    Errors that only a run can reveal (a crash, wrong bytes, a timeout) stay failed runs in the ledger.
    """
    from workbench.errors import StrategyUnavailable
    from workbench.formats import open_index
    from workbench.io.descriptors import check_descriptors
    from workbench.strategies import get_strategy

    indexes: dict[str, Any] = {}
    for config in configs:
        cls = get_strategy(config.strategy)
        strategy = cls.from_strings(dict(config.params))
        avail = cls.available()
        if not avail:
            raise StrategyUnavailable(config.strategy, avail.reason)
        name = require_device(config.device)
        if config.file not in indexes:
            indexes[config.file] = open_index(config.file)
            check_descriptors(indexes[config.file].path, len(indexes[config.file].files))  # a load holds one each
        fits = strategy.fits(indexes[config.file], name)  # format, dtypes, device (a GPU-only peer)
        if not fits:
            raise StrategyUnavailable(config.strategy, f"{config.file}: {fits.reason}")
    return indexes


def require_device(device: str) -> str:
    """The backend of ``device`` (``cuda`` of ``cuda:1``), or BackendUnavailable in one line when it is
    not here: the one rule for every command that records a device (run, compare, external)."""
    from workbench.errors import BackendUnavailable
    from workbench.upload import DEVICES, device_availability

    name = device.partition(":")[0]
    avail = device_availability(name)
    if not avail:
        raise BackendUnavailable(name, avail.reason, DEVICES.entries[name].hint)
    return name


def open_ledger(ledger: LedgerArg) -> Ledger:
    """A ``Ledger`` from a ``Ledger``, a path, or None (the default ledger)."""
    from workbench.ledger import Ledger

    return ledger if isinstance(ledger, Ledger) else Ledger(ledger)


def _timed_run(run_fn: RunFn, config: RunConfig, position: int, cache: str,
               lock_dir: str | os.PathLike[str] | None, model: Model | None = None) -> RunRecord:
    """One run: the model's cache state set over every file (``model``: its files resolved once per
    measurement, else ``config.file``), then ``run_fn`` under the device lock."""
    # The lock covers cache preparation too: evicting a file disturbs anyone timing the same disk.
    from workbench.io.hostmem import reported_kib

    with DeviceLock(config.device, lock_dir) as lock:
        reported_before = reported_kib()
        prepared = prepare_cache(config.file if model is None else model, cache)
        try:
            out = run_fn(config)
        except WorkerFailed as exc:  # the worker died or said nothing: that is this run's result
            out = Outcome(pid=exc.pid, load_s=None, wall_s=exc.wall_s, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a run that cannot even start is a failed run
            out = Outcome(pid=None, load_s=None, wall_s=None, error=f"could not run: {exc!r}")
        reported_after = reported_kib()
    report = out.report
    if reported_before is not None and reported_after is not None:
        # memory the VM handed back to its hypervisor around this run: a timing confounder
        report = dataclasses.replace(report, host_memory_reported_mib=(reported_after - reported_before) / 1024)
    reached, error, recheck = prepared.reached, prepared.error, report.cache_recheck
    if reached and recheck is not None and not recheck.reached:  # lost after the check, not put back in time
        reached, error = False, recheck.line()
    if error:
        report = dataclasses.replace(report, cache_error=error)
    return RunRecord(
        position=position, pid=out.pid, load_s=out.load_s, wall_s=out.wall_s, bytes=out.bytes,
        resident_before=prepared.resident, cache_state=cache, cache_reached=reached,
        verified=out.verified, engaged=out.engaged, phases=out.phases, minflt=out.minflt, majflt=out.majflt,
        lock_wait_s=lock.waited_s, error=out.error, report=report, resident_files=prepared.files)
