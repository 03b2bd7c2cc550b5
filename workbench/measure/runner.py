"""The runner: fresh worker per run, cache state set and checked before each, configs interleaved,
every run written to the ledger as it finishes, verdicts against a baseline, ceilings attached.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import uuid
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.errors import (
    LedgerError, MeasurementInterrupted, UnrecordedResults, WorkbenchError, WorkerFailed,
)
from workbench.measure.attempt import (
    AttemptResult, Decision, cache_label, decide, effective_state,
)
from workbench.measure.effect import DEFAULT_MIN_EFFECT
from workbench.measure.lock import DeviceLock
from workbench.measure.model import (  # noqa: F401 - recorded_identity: imported from here too
    Models, identity_members, model_directory, prepare_cache, recorded_identity,
)
from workbench.measure.order import DEFAULT_ORDER, interleave
from workbench.records import CACHE_STATES, AttemptStats, LoadPath, RunConfig, RunRecord
from workbench.measure.spawn import Outcome, run_worker

if TYPE_CHECKING:
    from workbench.formats.index import TensorIndex
    from workbench.ledger import Ledger
    from workbench.measure.model import Model

    # what ``ledger=`` accepts everywhere in measure/: an open Ledger, a path, or None (the default)
    LedgerArg = Ledger | str | os.PathLike[str] | None

RunFn = Callable[[RunConfig], Outcome]
Progress = Callable[[int, int, RunConfig, RunRecord], None]


def measure(configs: Sequence[RunConfig], *, runs: int = 5, cache: str = "cold", order: str = DEFAULT_ORDER,
            seed: int = 0, ledger: LedgerArg = None, campaign: str = "default", hypothesis: str = "",
            labels: Sequence[str] | None = None, baseline: str | None = None, verify: bool = True,
            timeout_s: float = 600.0, progress: Progress | None = None,
            lock_dir: str | os.PathLike[str] | None = None,
            min_effect: float = DEFAULT_MIN_EFFECT) -> list[AttemptResult]:
    """Measure ``configs`` interleaved, one fresh ``python -m workbench.measure.worker`` per run.

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

    Every config is compared with the baseline by the ratio of medians and its bootstrap interval,
    pairing the rounds of this call (round k = the k-th run of each config); a ``baseline`` from the
    ledger ran at another time, so its runs are not paired.
    """
    preflight(configs)
    run_fn = functools.partial(run_worker, verify=verify, timeout_s=timeout_s)
    return measure_with(run_fn, configs, runs=runs, cache=cache, order=order, seed=seed,
                        ledger=ledger, campaign=campaign, hypothesis=hypothesis, labels=labels,
                        baseline=baseline, progress=progress, lock_dir=lock_dir, min_effect=min_effect)


def measure_with(run_fn: RunFn, configs: Sequence[RunConfig], *, runs: int = 5, cache: str = "cold",
                 order: str = DEFAULT_ORDER, seed: int = 0, ledger: LedgerArg = None,
                 campaign: str = "default", hypothesis: str = "", labels: Sequence[str] | None = None,
                 baseline: str | None = None, progress: Progress | None = None,
                 lock_dir: str | os.PathLike[str] | None = None,
                 min_effect: float = DEFAULT_MIN_EFFECT) -> list[AttemptResult]:
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
    store = open_ledger(ledger)
    try:
        return _measure_runs(run_fn, configs, sequence, store, labels=labels, campaign=campaign,
                             hypothesis=hypothesis, cache=cache, baseline=baseline, progress=progress,
                             lock_dir=lock_dir, min_effect=min_effect)
    finally:
        if store is not ledger:  # opened here, so closed here
            store.close()


def _measure_runs(run_fn: RunFn, configs: Sequence[RunConfig], sequence: list[int], store: Ledger, *,
                  labels: Sequence[str] | None, campaign: str, hypothesis: str, cache: str,
                  baseline: str | None, progress: Progress | None,
                  lock_dir: str | os.PathLike[str] | None, min_effect: float) -> list[AttemptResult]:
    session = _Session(store, list(configs), labels, campaign, hypothesis, cache, min_effect)
    base_runs = None
    if baseline:
        baseline = store.resolve_id(baseline)  # a prefix is fine; a wrong one fails before any run
        base_runs = store.run_records(baseline)
    try:
        for position, i in enumerate(sequence):
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
    (any file of a set). Returns the index of each model.

    Errors that only a run can reveal (a crash, wrong bytes, a timeout) stay failed runs in the ledger.
    """
    from workbench.errors import BackendUnavailable, StrategyUnavailable
    from workbench.formats import open_index
    from workbench.strategies import get_strategy
    from workbench.upload import DEVICES, device_availability

    indexes: dict[str, Any] = {}
    for config in configs:
        cls = get_strategy(config.strategy)
        strategy = cls.from_strings(dict(config.params))
        avail = cls.available()
        if not avail:
            raise StrategyUnavailable(config.strategy, avail.reason)
        name = config.device.partition(":")[0]
        avail = device_availability(name)
        if not avail:
            raise BackendUnavailable(name, avail.reason, DEVICES.entries[name].hint)
        if config.file not in indexes:
            indexes[config.file] = open_index(config.file)
        fits = strategy.fits(indexes[config.file], name)  # format, dtypes, device (a GPU-only peer)
        if not fits:
            raise StrategyUnavailable(config.strategy, f"{config.file}: {fits.reason}")
    return indexes


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
    if prepared.error:
        report = dataclasses.replace(report, cache_error=prepared.error)
    return RunRecord(
        position=position, pid=out.pid, load_s=out.load_s, wall_s=out.wall_s, bytes=out.bytes,
        resident_before=prepared.resident, cache_state=cache, cache_reached=prepared.reached,
        verified=out.verified, engaged=out.engaged, phases=out.phases, minflt=out.minflt, majflt=out.majflt,
        lock_wait_s=lock.waited_s, error=out.error, report=report, resident_files=prepared.files)


class _Session:
    """The attempts of one measure() call, opened in the ledger lazily and finished together."""

    def __init__(self, ledger: Ledger, configs: list[RunConfig], labels: Sequence[str] | None,
                 campaign: str, hypothesis: str, cache: str, min_effect: float):
        self.ledger, self.configs, self.campaign = ledger, configs, campaign
        self.hypothesis, self.cache, self.min_effect = hypothesis, cache, min_effect
        self.labels = list(labels) if labels is not None else [c.display for c in configs]
        self.runs: list[list[RunRecord]] = [[] for _ in configs]
        self.ids: list[str | None] = [None for _ in configs]
        self.recorded = [0 for _ in configs]  # runs the ledger holds, per attempt
        self.finished: set[int] = set()  # attempts the ledger holds finished, with every run
        self.lost: LedgerError | None = None  # the first ledger write that failed
        self._env: dict[str, dict[str, Any]] = {}
        self.models = Models()  # each model's files and identity, resolved once
        ledger.ensure_campaign(campaign)

    def model(self, path: str) -> Model:
        """The model's files for preparing its cache state (resolved at its first run)."""
        return self.models.files(path)

    def add(self, i: int, record: RunRecord) -> None:
        """Keep a run, and record it now, opening its attempt first (with the device facts the worker
        reported) — unless a ledger write already failed: then the runs go on in memory only."""
        self.runs[i].append(record)
        self._write(self._record_run, i, record)

    def _record_run(self, i: int, record: RunRecord) -> None:
        if self.ids[i] is None:
            self.ids[i] = self._start(i, record)
        elif not record.cache_reached and all(r.cache_reached for r in self.runs[i][:-1]):
            # the first run that missed the state: the label says so from now on
            self.ledger.relabel_cache(self.ids[i], cache_label(self.cache, self.runs[i]))
        self.ledger.add_run(self.ids[i], record)
        self.recorded[i] += 1

    def _write(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        # After one failed write, none: a gap in the middle of an attempt's runs would read as a
        # complete attempt. What the ledger lacks goes into the dump instead (see unrecorded()).
        if self.lost is None:
            try:
                write(*args, **kwargs)
            except LedgerError as exc:
                self.lost = exc

    def unrecorded(self, results: list[AttemptResult]) -> UnrecordedResults:
        """Save every result to a JSON file, close the attempts the ledger opened (if it takes writes
        again) and describe it all as one error."""
        from workbench.measure.unrecorded import give_up

        kept = [(self.ids[i], i in self.finished, self.recorded[i], _summarize(runs))
                for i, runs in enumerate(self.runs)]
        return give_up(self.ledger, self.lost, results, kept, campaign=self.campaign, hypothesis=self.hypothesis)

    def _start(self, i: int, first: RunRecord) -> str:
        from workbench.defaults import host_id

        config = self.configs[i]
        # The worker reports the device it opened; the parent never opens one (a CUDA context here
        # would cost memory and time on the device being measured).
        device_info = dict(first.report.device_info or {"backend": config.device})
        identity = self.models.identity(config.file)
        environment = {**self._environment(config.file), "device": device_info, **_strategy_kind(config)}
        if identity.get("files"):  # a set: which members (and index file) its hash covers
            environment["model_files"] = identity_members(identity)
        engine = first.report.external
        kind = "external" if config.strategy == "external" else "strategy"
        binary = {"path": engine.binary_path, "hash": engine.binary_hash} if engine and engine.binary_hash else None
        return self.ledger.start_attempt(
            campaign=self.campaign, config=config, cache=cache_label(self.cache, [first]),
            hypothesis=self.hypothesis, label=self.labels[i], file_identity=identity, environment=environment,
            device_info=device_info, host=host_id(), kind=kind, binary=binary)

    def _environment(self, path: str) -> dict[str, Any]:
        from workbench.measure.environment import collect_environment

        directory = model_directory(self.model(path))
        if directory not in self._env:
            try:
                self._env[directory] = collect_environment(directory=directory)
            except WorkbenchError as exc:  # a missing directory: the failed runs say the rest
                self._env[directory] = {"error": str(exc)}
        return self._env[directory]

    def abandon(self, note: str) -> list[str]:
        """Close the attempts already opened as failed, keeping their runs; used on interruption.
        Returns their ids."""
        closed = []
        for i, attempt_id in enumerate(self.ids):
            if attempt_id is None:
                continue
            closed.append(attempt_id)
            try:
                self.ledger.finish_attempt(attempt_id, _summarize(self.runs[i]), baseline_id=None,
                                           speedup=None, verdict="failed", notes=note,
                                           verdict_reason="interrupted")
            except Exception:  # noqa: BLE001 - never mask the error that interrupted the runs
                pass
        return closed

    def finish(self, baseline: str | None, base_runs: Sequence[RunRecord] | None) -> list[AttemptResult]:
        """Summarize, judge and close every attempt: against the first config, its rounds paired, or
        against a ledger ``baseline`` (``base_runs``: its runs), unpaired."""
        from workbench.measure.bounds import bounding_ceiling, host_ceilings

        stats = [_summarize(r) for r in self.runs]
        self.baseline_note = ""
        # an attempt the ledger never opened (its writes failed) still needs an id in the results
        self.result_ids = [known or uuid.uuid4().hex for known in self.ids]
        if baseline is None:
            base_runs, baseline_id, self.paired = self.runs[0], self.result_ids[0], True
        else:
            baseline_id, self.paired = baseline, False
            self.baseline_note = self._baseline_mismatch(baseline)
        # walls per model: a read of the whole model counts only for loads of that model
        walls = {c.file: host_ceilings(self.ledger, model=self.models.canonical(c.file)) for c in self.configs}
        return [self._finish_one(i, stats[i], base_runs, baseline_id, walls[c.file], bounding_ceiling)
                for i, c in enumerate(self.configs)]

    def _baseline_mismatch(self, baseline: str) -> str:
        """What differs between a ledger baseline and this measurement (file, cache, device), if anything:
        a verdict against a baseline taken on another file or cache state compares two different things."""
        base = self.ledger.attempt(baseline)
        config = self.configs[0]
        ours = {"file": self.models.identity(config.file).get("hash"), "cache": self.cache, "device": config.device}
        theirs = {"file": base.get("file_hash"), "cache": base.get("cache"), "device": base.get("device")}
        diff = [f"{k} {theirs[k]!r} vs {ours[k]!r}" for k in ours if theirs[k] and ours[k] and theirs[k] != ours[k]]
        return f"baseline {baseline[:8]} differs: {', '.join(diff)}" if diff else ""

    def _decide(self, i: int, runs: Sequence[RunRecord], base_runs: Sequence[RunRecord] | None,
                is_base: bool) -> tuple[Decision, str]:
        """The verdict and the notes: runs on another model than the baseline's (another set) are
        compared but never paired by round, and a model that changed while measured fails its attempt."""
        config, base = self.configs[i], self.configs[0]
        same = not self.paired or self.models.same(config.file, base.file)
        d = decide(runs, base_runs, is_baseline=is_base, paired=self.paired and same, min_effect=self.min_effect)
        notes = [d.note, "" if is_base else self.baseline_note]
        if not same and not is_base:
            notes.append(f"another model than the baseline's ({self.models.identity(base.file).get('path')} vs "
                         f"{self.models.identity(config.file).get('path')}): rounds not paired")
        changed = self.models.changed(config.file)
        if changed:
            d = dataclasses.replace(d, verdict="failed", reason=changed)
            notes.append(changed)
        return d, "; ".join(filter(None, notes))

    def _finish_one(self, i: int, stats: AttemptStats, base_runs: Sequence[RunRecord] | None,
                    baseline_id: str | None, walls: dict[str, float],
                    bound: Callable[..., tuple[str, float] | None]) -> AttemptResult:
        from workbench.measure.stats import stability_warning

        runs, config = tuple(self.runs[i]), self.configs[i]
        is_base = baseline_id == self.result_ids[i]
        decision, note = self._decide(i, runs, base_runs, is_base)
        label = cache_label(self.cache, runs)
        if label != cache_label(self.cache, runs[:1]):
            note = "; ".join(filter(None, [note, f"cache state: {label}"]))
        wall = bound(walls, effective_state(label, runs), config.device, _load_path(runs))
        name, gbps = wall if wall else (None, None)
        fraction = stats.gbps / gbps if gbps and stats.gbps else None
        d = decision
        if self.ids[i] is not None:
            self._write(self.ledger.finish_attempt, self.ids[i], stats,
                        baseline_id=None if is_base else baseline_id, speedup=d.speedup, verdict=d.verdict,
                        ceiling_name=name, ceiling_gbps=gbps, notes=note, cache=label,
                        ci=(d.ci_low, d.ci_high), verdict_reason=d.reason)
            if self.lost is None:  # that write, and every one before it, went through
                self.finished.add(i)
        return AttemptResult(
            attempt_id=self.result_ids[i], config=config, cache=label, runs=runs, stats=stats,
            baseline_id=None if is_base else baseline_id, speedup=d.speedup, verdict=d.verdict,
            warning=stability_warning(stats, runs), ci_low=d.ci_low, ci_high=d.ci_high,
            verdict_reason=d.reason, ceiling_name=name, ceiling_gbps=gbps,
            ceiling_fraction=fraction, label=self.labels[i], cache_requested=self.cache, notes=note,
            recorded="all" if i in self.finished else ("part" if self.ids[i] is not None else "none"))


def _strategy_kind(config: RunConfig) -> dict[str, str]:
    """``{"strategy_kind": "peer"}`` for a reference strategy (``"strategy"`` for the workbench's own),
    so ledgers and exports can list references as such; nothing for a name outside the registry."""
    from workbench.strategies import STRATEGIES, strategy_kind

    return {"strategy_kind": strategy_kind(config.strategy)} if config.strategy in STRATEGIES else {}


def _load_path(runs: Sequence[RunRecord]) -> LoadPath | None:
    """What the first successful run's load did (readers, copy source, O_DIRECT), for its wall."""
    for run in runs:
        if run.ok:
            return run.report.load.path if run.report.load is not None else None
    return None


def _summarize(runs: Sequence[RunRecord]) -> AttemptStats:
    from workbench.measure.stats import summarize

    nbytes = max((r.bytes for r in runs if r.ok), default=0)
    return summarize(runs, nbytes)
