"""Long expert sessions as a measurement: one worker process, every turn in the ledger as it ends.

``measure_session(file, SessionConfig(...))`` holds the device lock for the whole session (cache
preparation included), spawns ``python -m workbench.measure.session_worker`` and records one ledger
attempt (``kind="session"``) with one ``turns`` row per turn, written the moment the worker reports
it. A worker that dies, times out or is interrupted leaves its finished turns recorded and its attempt
``failed`` with the reason. The summary (the leak indicators, tokens/s) is rebuilt here from the
turns, so what the ledger holds and what the caller gets are the same numbers.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from workbench.errors import ParamError
from workbench.expert.session import SessionConfig, check_config
from workbench.expert.session_records import SessionFacts, SessionReport, TurnRecord, summarize
from workbench.measure.lock import DeviceLock
from workbench.records import AttemptStats, RunConfig

if TYPE_CHECKING:
    from workbench.ledger import Ledger

TurnCallback = Callable[[TurnRecord], None]


@dataclass(frozen=True)
class SessionResult:
    """One measured session: its ledger attempt, the turns, the summary (None when no turn ended)."""

    attempt_id: str
    file: str
    device: str
    cache: str
    resident_before: float | None
    report: SessionReport | None
    verdict: str
    notes: str
    error: str | None = None
    resident_files: Mapping[str, float] = field(default_factory=dict)  # per file of the model, before


def measure_session(file: str, config: SessionConfig, *, device: str = "host", cache: str = "asis",
                    ledger: Ledger | str | os.PathLike[str] | None = None, campaign: str = "default",
                    hypothesis: str = "", label: str = "", timeout_s: float = 3600.0,
                    lock_dir: str | os.PathLike[str] | None = None,
                    on_turn: TurnCallback | None = None) -> SessionResult:
    """Run one session of ``config`` on ``file`` in a worker process and record it; see the module doc.

    Parameters
    ----------
    cache
        Page-cache state of the model file set (and checked) before the session: cold, warm, asis.
    timeout_s
        The whole session's limit; past it the worker is killed and the attempt is ``failed``.
    on_turn
        Called with each turn's record as soon as it is in the ledger.
    """
    from workbench.measure.model import prepare_cache
    from workbench.measure.runner import open_ledger

    preflight_session(file, config, device)
    store = open_ledger(ledger)
    run = _Recorder(store, file, config, device, campaign, hypothesis, label, on_turn)
    try:
        with DeviceLock(device, lock_dir):
            prepared = prepare_cache(file, cache)  # every file of the model
            run.cache = cache if prepared.reached or cache == "asis" else \
                f"asis(unreachable: {cache}; {prepared.error})"[:300]
            run.resident_before, run.resident_files = prepared.resident, dict(prepared.files)
            run.error = _spawn(file, config, device, timeout_s, run.on_event)
        run.finish()  # a worker that stopped without its end event: failed, its turns kept
    except BaseException as exc:
        run.error = f"interrupted after {len(run.records)} turns: {type(exc).__name__}"
        run.finish()
        raise
    finally:
        if store is not ledger:
            store.close()
    return run.result


def preflight_session(file: str, config: SessionConfig, device: str) -> None:
    """One line before anything is recorded: a missing or dense model, bad settings, a missing backend."""
    from workbench.errors import BackendUnavailable
    from workbench.expert.routing import load_trace, moe_shape
    from workbench.formats import open_index
    from workbench.upload import DEVICES, device_availability

    check_config(config)
    index = open_index(file)
    if not index.blobs:
        raise ParamError("session", "file", f"{file} has no expert blobs: a session needs a MoE model")
    if config.trace is not None:
        layers, n_experts = moe_shape(index.blobs)
        load_trace(config.trace, layers=layers, n_experts=n_experts)
    name = device.partition(":")[0]
    avail = device_availability(name)
    if not avail:
        raise BackendUnavailable(name, avail.reason, DEVICES.entries[name].hint)


def _spawn(file: str, config: SessionConfig, device: str, timeout_s: float,
           on_event: Callable[[dict[str, Any]], None]) -> str | None:
    """Run the worker, handing each event line to ``on_event``; the error ('' → None when it ended well)."""
    payload = {"file": file, "device": device, "session": dataclasses.asdict(config)}
    cmd = [sys.executable, "-m", "workbench.measure.session_worker", "-"]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:  # a file: a chatty worker never blocks
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        timed_out = threading.Event()
        timer = threading.Timer(timeout_s, lambda: (timed_out.set(), _kill(proc)))
        timer.start()
        try:
            proc.stdin.write(json.dumps(payload))
            proc.stdin.close()
            for line in proc.stdout:
                if line.startswith("{"):
                    on_event(json.loads(line))
            proc.wait()
        except BaseException:  # Ctrl-C, or a ledger write that failed: the worker must not live on
            _kill(proc)
            proc.wait()
            raise
        finally:
            timer.cancel()
        err.seek(0)
        tail = err.read().strip()[-2000:]
    if timed_out.is_set() and proc.returncode != 0:
        return f"session timed out after {timeout_s:g} s"
    if proc.returncode != 0:
        last = tail.splitlines()[-1] if tail else "no stderr"
        return f"session worker exit {proc.returncode}: {last}"
    return None


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker's whole process group (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Recorder:
    """Turns the worker's events into one ledger attempt and its turns rows, as they arrive."""

    def __init__(self, ledger: Ledger, file: str, config: SessionConfig, device: str, campaign: str,
                 hypothesis: str, label: str, on_turn: TurnCallback | None):
        self.ledger, self.file, self.config, self.device = ledger, file, config, device
        self.campaign, self.hypothesis, self.on_turn = campaign, hypothesis, on_turn
        self.label = label or session_label(file, config)
        self.cache, self.resident_before, self.error = "asis", None, None
        self.resident_files: dict[str, float] = {}
        self.records: list[TurnRecord] = []
        self.facts: SessionFacts | None = None
        self.verified_slices = 0
        self.attempt_id: str | None = None
        self.result: SessionResult | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self.facts = SessionFacts.from_json(event["facts"])
            self._start(event.get("device_info") or {"backend": self.device})
        elif kind == "turn":
            record = TurnRecord.from_json(event["turn"])
            self.records.append(record)
            self.ledger.add_turn(self._start({"backend": self.device}), record.to_json())
            if self.on_turn is not None:
                self.on_turn(record)
        elif kind == "end":
            self.verified_slices = int(event.get("verified_slices", 0))
            self.finish()

    def _start(self, device_info: dict[str, Any]) -> str:
        if self.attempt_id is None:
            from workbench.measure.environment import collect_environment
            from workbench.measure.model import identity_members, model_directory, recorded_identity, resolve_model

            params = {k: v for k, v in dataclasses.asdict(self.config).items() if v is not None}
            model = resolve_model(self.file)
            ident = recorded_identity(model)  # a set's: over every member and its index file
            env = {**collect_environment(model_directory(model)), "device": device_info,
                   "session": self.facts.to_json() if self.facts is not None else {},
                   "resident_before": {"model": self.resident_before, "files": self.resident_files}}
            if ident.get("files"):
                env["model_files"] = identity_members(ident)
            self.attempt_id = self.ledger.start_attempt(
                campaign=self.campaign, config=RunConfig(self.file, "session", params, self.device),
                cache=self.cache, hypothesis=self.hypothesis, label=self.label, file_identity=ident,
                environment=env, device_info=device_info, kind="session")
        return self.attempt_id

    def finish(self) -> None:
        """Close the attempt once (on the end event, or after the worker stopped without one)."""
        if self.result is not None:
            return
        attempt_id = self._start({"backend": self.device})
        report = (SessionReport(tuple(self.records), summarize(self.records, self.facts, self.verified_slices))
                  if self.records and self.facts is not None else None)
        ended = report is not None and self.error is None and len(self.records) == self.config.turns
        verdict = "baseline" if ended else "failed"
        notes = "; ".join(filter(None, [self.error or ("" if ended else "the session did not finish"),
                                        summary_line(report) if report else ""]))
        self.ledger.finish_attempt(attempt_id, session_stats(self.records, failed=not ended), baseline_id=None,
                                   speedup=None, verdict=verdict, notes=notes, cache=self.cache,
                                   verdict_reason="a session is measured on its own; compare sessions side by side")
        self.result = SessionResult(attempt_id, self.file, self.device, self.cache, self.resident_before, report,
                                    verdict, notes, self.error, dict(self.resident_files))


def session_label(file: str, config: SessionConfig) -> str:
    """``session inplace release=off 20×64 · model``: what a table row needs to tell sessions apart."""
    from workbench.measure.model import model_name

    return (f"session {config.placement} release={config.boundary_release} {config.turns}×{config.tokens} "
            f"cache={config.cache_mib:g}MiB · {model_name(file)}")


def session_stats(records: list[TurnRecord], failed: bool = False) -> AttemptStats:
    """Turn seconds as the samples (median/min/max/spread); GB/s is all bytes staged over all turn time."""
    from workbench.measure.stats import STABLE_SPREAD_PCT

    seconds = [r.seconds for r in records]
    if not seconds:
        return AttemptStats(0, int(failed), None, None, None, None, None, stable=False)
    median, low, high = statistics.median(seconds), min(seconds), max(seconds)
    spread = (high - low) / median * 100 if median > 0 else None
    total = sum(seconds)
    gbps = sum(r.bytes_read for r in records) / total / 1e9 if total > 0 else None
    return AttemptStats(len(seconds), int(failed), median, low, high, spread, gbps,
                        spread is not None and spread <= STABLE_SPREAD_PCT)


def summary_line(report: SessionReport) -> str:
    """``unreleased pages 0 → 1,204 (+240.8/turn); tok/s median 812 (790–830); …`` for the attempt's notes."""
    s = report.summary
    return (f"{s.turns} turns × {report.turns[0].tokens} tokens; unreleased pages {s.unreleased_pages_first:,} → "
            f"{s.unreleased_pages_last:,} ({s.unreleased_pages_per_turn:+.1f}/turn); tok/s median "
            f"{s.tokens_per_s_median:.1f} ({s.tokens_per_s_min:.1f}–{s.tokens_per_s_max:.1f}); hit rate "
            f"{s.hit_rate:.0%}; {s.facts.placement_report}; reader {s.facts.reader}")


__all__ = ["SessionResult", "measure_session", "preflight_session", "session_label", "session_stats",
           "summary_line"]
