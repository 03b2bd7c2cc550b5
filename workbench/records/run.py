"""What the runner hands the ledger: frozen records of runs, attempts and their statistics.

These are the contract between ``measure`` (which produces them), ``ledger`` (which stores them) and
the notebooks/CLI (which read them back). Raw samples are kept; medians are derived from them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Sequence

from workbench.records.worker_report import WorkerReport

CACHE_STATES = ("cold", "warm", "asis")
# Set by the runner from the numbers: baseline, faster, slower, inconclusive, failed.
# Set by a person afterwards (``workbench ledger verdict``): kept, reverted, reference.
AUTO_VERDICTS = ("baseline", "faster", "slower", "inconclusive", "failed")
USER_VERDICTS = ("kept", "reverted", "reference")
VERDICTS = AUTO_VERDICTS + USER_VERDICTS


@dataclass(frozen=True)
class RunConfig:
    """One configuration to measure: a strategy with parameters on a file and a device."""

    file: str
    strategy: str
    params: Mapping[str, Any] = field(default_factory=dict)
    device: str = "host"
    label: str = ""  # human name in tables; defaults to "strategy k=v …"

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        extra = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.strategy} {extra}".strip()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        """A configuration back from :meth:`to_json` (keys it does not know are ignored)."""
        return cls(file=str(data["file"]), strategy=str(data["strategy"]), params=dict(data.get("params") or {}),
                   device=str(data.get("device") or "host"), label=str(data.get("label") or ""))


@dataclass(frozen=True)
class RunRecord:
    """One fresh-process run. ``error`` is set (and ``load_s`` None) when the run failed."""

    position: int  # index in the interleaved order of the whole comparison
    pid: int | None
    load_s: float | None  # the load window, after interpreter start and device init
    wall_s: float | None  # the whole worker process, spawn to exit, as the parent saw it
    bytes: int
    resident_before: float | None  # mincore fraction of the model (every file) just before the run started
    cache_state: str  # what was asked: cold / warm / asis
    cache_reached: bool | None  # whether resident_before matches the state asked for (None: never tried)
    verified: bool | None  # device bytes == file bytes (None: not checked)
    engaged: tuple[str, ...] = ()
    phases: Mapping[str, float] = field(default_factory=dict)
    minflt: int = 0
    majflt: int = 0
    lock_wait_s: float = 0.0
    error: str | None = None
    report: WorkerReport = field(default_factory=WorkerReport)  # what the run itself reported
    # file name → mincore fraction just before the run, for every file of the model (its index file too)
    resident_files: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.load_s is not None

    def to_json(self) -> dict[str, Any]:
        """The run as the ledger's ``runs`` row holds it: the report under ``result``."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "report"}
        d.update(engaged=list(self.engaged), phases=dict(self.phases), result=self.report.to_json(),
                 resident_files=dict(self.resident_files))
        return d

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """A run back from :meth:`to_json` or a ledger row (columns it does not know are ignored)."""
        known = {f.name for f in fields(cls)} - {"report"}
        values = {k: v for k, v in data.items() if k in known}
        values["engaged"] = tuple(values.get("engaged") or ())
        values["phases"] = dict(values.get("phases") or {})
        values["resident_files"] = {str(k): float(v) for k, v in (values.get("resident_files") or {}).items()}
        return cls(**values, report=WorkerReport.from_json(data.get("result") or {}))


@dataclass(frozen=True)
class AttemptStats:
    """Statistics over the successful runs of an attempt (seconds; GB/s from the median)."""

    n: int
    n_failed: int
    median_s: float | None
    min_s: float | None
    max_s: float | None
    spread_pct: float | None  # (max - min) / median * 100
    gbps: float | None
    stable: bool  # spread <= 10 %

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptStats:
        """Statistics back from :meth:`to_json` (or an attempt's ``--json``; other keys are ignored)."""
        def opt(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        return cls(n=int(data.get("n") or 0), n_failed=int(data.get("n_failed") or 0), median_s=opt("median_s"),
                   min_s=opt("min_s"), max_s=opt("max_s"), spread_pct=opt("spread_pct"), gbps=opt("gbps"),
                   stable=bool(data.get("stable")))


def failure_reason(n_runs: int, errors: Sequence[str], n_wrong: int) -> str:
    """Why an attempt counts as failed, in one line ('' when it does not): its failed runs (with the
    last line of the first error) and its runs that put wrong bytes on the device. Used by the runner's
    verdict note and by the ledger's tables, so both say it the same way."""
    if n_runs == 0:
        return "no runs recorded"
    reasons = []
    if errors:
        reasons.append(f"{len(errors)}/{n_runs} runs failed: {_summary_line(str(errors[0]))[:100]}")
    if n_wrong:
        reasons.append(f"{n_wrong}/{n_runs} runs read back wrong bytes")
    return "; ".join(reasons)


def _summary_line(error: str) -> str:
    """The line of an error that says what happened: the last line (a traceback's exception), except
    for a worker that died, timed out or said nothing with a stderr of several lines (``worker killed
    by SIGSEGV …; stderr: <faulthandler's dump>``): there the part before its stderr tail."""
    lines = error.strip().splitlines()
    if not lines:
        return "error"
    head, sep, _ = lines[0].partition("; stderr:")
    return head if sep and len(lines) > 1 else lines[-1]
