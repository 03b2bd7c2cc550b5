"""The runner's bookkeeping of one measurement: each configuration's attempt opened before its first run,
every run written as it finishes (what the ledger could not take kept for the dump), the attempts
judged and closed at the end (verdicts against a baseline, ceilings attached) or abandoned on an
interruption. :mod:`workbench.measure.run.runner` drives the runs; this module records them.
"""
from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.errors import LedgerError, UnrecordedResults, WorkbenchError
from workbench.measure.run.attempt import AttemptResult, Decision, cache_label, decide, effective_state
from workbench.measure.engine.evidence import evidence_note
from workbench.measure.run.model import Models, identity_members, model_directory, recheck_note
from workbench.records.baseline_match import across_caveat, baseline_differences, describe_across
from workbench.records import (
    AttemptStats, LoadPath, RunConfig, RunRecord, format_differences, settings_differences,
)

if TYPE_CHECKING:
    from workbench.ledger import Ledger
    from workbench.measure.run.model import Model


class Session:
    """The attempts of one measure() call, opened in the ledger lazily and finished together."""

    def __init__(self, ledger: Ledger, configs: list[RunConfig], labels: Sequence[str] | None,
                 campaign: str, hypothesis: str, cache: str, min_effect: float, models: Models | None = None):
        self.ledger, self.configs, self.campaign = ledger, configs, campaign
        self.hypothesis, self.cache, self.min_effect = hypothesis, cache, min_effect
        self.labels = list(labels) if labels is not None else [c.display for c in configs]
        self.runs: list[list[RunRecord]] = [[] for _ in configs]
        self.ids: list[str | None] = [None for _ in configs]
        self.recorded = [0 for _ in configs]  # runs the ledger holds, per attempt
        self.finished: set[int] = set()  # attempts the ledger holds finished, with every run
        self.lost: LedgerError | None = None  # the first ledger write that failed
        self._env: dict[str, dict[str, Any]] = {}
        self.models = models or Models()  # each model's files and identity, resolved once
        self.across = ""  # what a ledger baseline measured differently, when asked to compare anyway
        ledger.ensure_campaign(campaign)

    def model(self, path: str) -> Model:
        """The model's files for preparing its cache state (resolved at its first run)."""
        return self.models.files(path)

    def open(self, i: int) -> None:
        """Record attempt ``i`` (running) before its first run, unless it is open already or a ledger
        write failed (then the runs go on in memory only)."""
        if self.ids[i] is None:
            self._write(self._start, i)

    def add(self, i: int, record: RunRecord) -> None:
        """Keep a run, and record it now — with, after the first, the device facts the worker reported —
        unless a ledger write already failed: then the runs go on in memory only."""
        self.runs[i].append(record)
        if self.ids[i] is not None:
            self._write(self._record_run, i, record)

    def _record_run(self, i: int, record: RunRecord) -> None:
        if len(self.runs[i]) == 1:
            self._describe(i, record)
        if not record.cache_reached and all(r.cache_reached for r in self.runs[i][:-1]):
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
        from workbench.measure.run.unrecorded import give_up

        kept = [(self.ids[i], i in self.finished, self.recorded[i], _summarize(runs))
                for i, runs in enumerate(self.runs)]
        return give_up(self.ledger, self.lost, results, kept, campaign=self.campaign, hypothesis=self.hypothesis)

    def _start(self, i: int) -> None:
        from workbench.settings.defaults import host_id

        config = self.configs[i]
        # The worker reports the device it opened after its run (_describe); the parent never opens one
        # (a CUDA context here would cost memory and time on the device being measured).
        device_info = {"backend": config.device}
        identity = self.models.identity(config.file)
        environment = {**self._environment(config.file), "device": device_info, **_strategy_kind(config)}
        if identity.get("hash"):  # which files (and index file) its hash covers: names and paths read
            environment["model_files"] = identity_members(identity)
        kind = "external" if config.strategy == "external" else "strategy"
        self.ids[i] = self.ledger.start_attempt(
            campaign=self.campaign, config=config, cache=cache_label(self.cache, []), hypothesis=self.hypothesis,
            label=self.labels[i], file_identity=identity, environment=environment, device_info=device_info,
            host=host_id(), kind=kind)

    def _describe(self, i: int, first: RunRecord) -> None:
        """What the first run reported: the device the worker opened, an engine's build."""
        engine = first.report.external
        binary = {"path": engine.binary_path, "hash": engine.binary_hash} if engine and engine.binary_hash else None
        device_info = first.report.device_info
        if device_info or binary:
            self.ledger.describe_attempt(self.ids[i], device_info=device_info, binary=binary)

    def _environment(self, path: str) -> dict[str, Any]:
        from workbench.measure.run.environment import collect_environment

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
        from workbench.measure.ceilings.bounds import bounding_ceiling, host_ceilings

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
        """The load-path settings that differ between a ledger baseline and this measurement, if any (its
        model, cache state and device were checked before the first run: runner.check_baseline)."""
        base = self.ledger.attempt(baseline)
        config = self.configs[0]
        diff = []
        # the device as the worker reported it (name, binding), as the baseline's environment holds it
        first = next((r for r in self.runs[0] if r.report is not None and r.report.device_info), None)
        device = dict(first.report.device_info) if first is not None else {"backend": config.device}
        settings = settings_differences(base.get("environment"), {**self._environment(config.file), "device": device})
        if settings:
            diff.append(f"load-path settings {format_differences(settings, limit=4)}")
        return f"baseline {baseline[:8]} differs: {', '.join(diff)}" if diff else ""

    def _ceiling_caveat(self, name: str, file: str) -> str:
        from workbench.measure.ceilings.age import ceiling_caveat

        return ceiling_caveat(self.ledger, name, self._environment(file))

    def _decide(self, i: int, runs: Sequence[RunRecord], base_runs: Sequence[RunRecord] | None,
                is_base: bool) -> tuple[Decision, str]:
        """The verdict and the notes: runs on another model than the baseline's (another set) are
        compared but never paired by round, and a model that changed while measured fails its attempt."""
        config, base = self.configs[i], self.configs[0]
        same = not self.paired or self.models.same(config.file, base.file)
        d = decide(runs, base_runs, is_baseline=is_base, paired=self.paired and same, min_effect=self.min_effect)
        notes = [d.note, "" if is_base else self.baseline_note, "" if is_base else across_caveat({"baseline_across": self.across_of(i)})]
        if not same and not is_base:
            notes.append(f"another model than the baseline's ({self.models.identity(base.file).get('path')} vs "
                         f"{self.models.identity(config.file).get('path')}): rounds not paired")
        changed = self.models.changed(config.file)
        if changed:
            d = dataclasses.replace(d, verdict="failed", reason=changed)
            notes.append(changed)
        return d, "; ".join(filter(None, notes))

    def across_of(self, i: int) -> str:
        """``baseline … is another model …`` for config ``i`` ('' when its baseline measured the same):
        a ledger baseline allowed across, or the first config, of another model."""
        if not self.paired:
            return self.across
        first, config = self.configs[0], self.configs[i]
        if i == 0 or self.models.same(config.file, first.file):
            return ""
        mine, theirs = self.models.identity(config.file), self.models.identity(first.file)
        what = describe_across(self.result_ids[0], baseline_differences(
            {"file_hash": mine.get("hash"), "file_size": mine.get("size"), "file_path": mine.get("path")},
            {"file_hash": theirs.get("hash"), "file_size": theirs.get("size"), "file_path": theirs.get("path")}))
        return what

    def _finish_one(self, i: int, stats: AttemptStats, base_runs: Sequence[RunRecord] | None,
                    baseline_id: str | None, walls: dict[str, float],
                    bound: Callable[..., tuple[str, float] | None]) -> AttemptResult:
        from workbench.measure.run.stats import stability_warning

        runs, config = tuple(self.runs[i]), self.configs[i]
        is_base = baseline_id == self.result_ids[i]
        decision, note = self._decide(i, runs, base_runs, is_base)
        label = cache_label(self.cache, runs)
        if label != cache_label(self.cache, runs[:1]):
            note = "; ".join(filter(None, [note, f"cache state: {label}"]))
        note = "; ".join(filter(None, [note, evidence_note(runs), recheck_note(runs)]))
        # no GB/s (an engine with no evidence it read the model, no successful run): no wall to hold it to
        wall = bound(walls, effective_state(label, runs), config.device, _load_path(runs)) if stats.gbps else None
        name, gbps = wall if wall else (None, None)
        if name:  # a wall measured long ago or under other settings says so
            note = "; ".join(filter(None, [note, self._ceiling_caveat(name, config.file)]))
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
            recorded="all" if i in self.finished else ("part" if self.ids[i] is not None else "none"),
            verdict_n=d.n, settings=dict(self._environment(config.file).get("settings") or {}),
            baseline_across="" if is_base else self.across_of(i))


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
    from workbench.measure.run.stats import summarize

    # GB/s over the bytes every counted run vouches for: an external engine's run without evidence
    # that it read the model carries none, and then its attempt shows time only
    nbytes = min((r.bytes for r in runs if r.ok), default=0)
    return summarize(runs, nbytes)
