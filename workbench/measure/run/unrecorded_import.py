"""Bring an unrecorded-results dump (:mod:`workbench.measure.run.unrecorded`) back into a ledger.

``workbench ledger import-unrecorded DUMP.json``: every attempt of the dump that the ledger does not
hold in full is recorded through the ledger's own API, as the runner would have recorded it
(``start_attempt``, ``add_run`` per run, ``finish_attempt`` with the dump's statistics and verdict).

Matching, so that importing twice adds nothing:

- an attempt of the dump is *the same* as a ledger attempt when the ledger id is the dump's
  ``attempt_id`` (the ledger opened it before its writes failed), or when the ledger attempt was
  itself imported from that dump attempt (``environment.imported_from.attempt_id``, which survives a
  ``ledger merge``), or, failing both, when it is in the same campaign with the same label and holds a
  run of the same ``(pid, position)``;
- a run is *the same* as a ledger run of the matched attempt when its ``(pid, position)`` are;
- a matched attempt is held *in full* when every run is there and its automatic verdict and verdict
  reason are the dump's (an attempt the runner closed as "ledger write failed" or a reader reaped as
  "interrupted" is not): then nothing is written. Otherwise the missing runs are added and the attempt
  is finished with the dump's statistics and verdict, its notes saying it was imported from the dump.

The whole dump is checked before anything is written: a file that is not such a dump is one
:class:`~workbench.errors.UnrecordedDumpError`, nothing recorded.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from workbench.errors import FormatError, UnrecordedDumpError, WorkbenchError
from workbench.formats.opening import open_regular_file
from workbench.measure.run.attempt import run_from_json
from workbench.measure.run.model import recorded_identity
from workbench.records import VERDICTS, AttemptStats, RunConfig, RunRecord

if TYPE_CHECKING:
    from workbench.ledger import Ledger

MAX_DUMP_BYTES = 256 * 2**20  # what a dump may hold (the runner's: ~1 KiB a run)
_TOP = {"ledger": str, "error": str, "attempts": list}
_ATTEMPT = {"attempt_id": str, "strategy": str, "params": dict, "device": str, "cache": str, "n": int,
            "verdict": str, "runs": list, "label": str, "file": str}
_ATTEMPT_OPT_NUM = ("median_s", "min_s", "max_s", "spread_pct", "gbps", "speedup", "ci_low", "ci_high",
                    "ceiling_gbps")
_ATTEMPT_OPT_STR = ("baseline_id", "verdict_reason", "ceiling_name", "notes", "cache_requested")
_RUN = {"position": int, "bytes": int, "cache_state": str}
_RUN_OPT = {"pid": int, "load_s": (int, float), "wall_s": (int, float), "resident_before": (int, float),
            "verified": bool, "cache_reached": bool, "error": str, "engaged": list, "phases": dict,
            "minflt": int, "majflt": int, "lock_wait_s": (int, float), "result": dict, "timings": dict,
            "external": dict, "resident_files": dict}


@dataclass(frozen=True)
class DumpAttempt:
    """One attempt of a dump, parsed: what the runner would have recorded."""

    dump_id: str
    config: RunConfig
    label: str
    cache: str
    runs: tuple[RunRecord, ...]
    stats: AttemptStats
    verdict: str
    baseline_id: str | None
    speedup: float | None
    ci: tuple[float | None, float | None]
    verdict_reason: str
    ceiling_name: str | None
    ceiling_gbps: float | None
    notes: str


@dataclass(frozen=True)
class Dump:
    """A parsed dump: where it came from and its attempts."""

    path: Path
    campaign: str | None
    hypothesis: str
    host: str | None
    attempts: tuple[DumpAttempt, ...]


@dataclass(frozen=True)
class Imported:
    """What happened to one attempt of the dump: ``imported`` (new), ``completed`` (the ledger held
    part of it) or ``present`` (held in full, nothing written)."""

    label: str
    dump_id: str
    ledger_id: str
    status: str
    runs_added: int


def read_dump(path: str | os.PathLike[str]) -> Dump:
    """Parse and check a dump; :class:`UnrecordedDumpError` names the file and the first problem."""
    path = Path(path)
    try:
        with open_regular_file(path) as f:  # a FIFO or a device named here is refused, never waited on
            too_big = os.fstat(f.fileno()).st_size > MAX_DUMP_BYTES
            raw = b"" if too_big else f.read(MAX_DUMP_BYTES + 1)
    except FormatError as exc:
        raise UnrecordedDumpError(path, f"cannot read it ({exc.detail})") from None
    except OSError as exc:
        raise UnrecordedDumpError(path, f"cannot read it ({exc.strerror or exc})") from None
    if too_big or len(raw) > MAX_DUMP_BYTES:
        raise UnrecordedDumpError(path, f"larger than the {MAX_DUMP_BYTES // 2**20} MiB a dump may be (a dump "
                                        "of 10,000 runs is a few MiB)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnrecordedDumpError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnrecordedDumpError(path, f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError:  # a dump is three levels deep; Python's parser recurses once per level
        raise UnrecordedDumpError(path, "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise UnrecordedDumpError(path, f"expected a JSON object, got {type(data).__name__}")
    _check(path, data, _TOP, "")
    for key in ("campaign", "hypothesis", "host"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise UnrecordedDumpError(path, f"'{key}' should be a string")
    if data.get("campaign") is not None and not data["campaign"].strip():
        raise UnrecordedDumpError(path, "'campaign' is empty")
    attempts = []
    for i, a in enumerate(data["attempts"]):
        where = f"attempts[{i}]"
        if not isinstance(a, dict):
            raise UnrecordedDumpError(path, f"{where} should be an object")
        attempts.append(_parse_attempt(path, a, where))
    return Dump(path, data.get("campaign"), data.get("hypothesis") or "", data.get("host"), tuple(attempts))


def _parse_attempt(path: Path, a: Mapping[str, Any], where: str) -> DumpAttempt:
    _check(path, a, _ATTEMPT, f"{where}.")
    for key in _ATTEMPT_OPT_NUM:
        _opt(path, a, key, (int, float), f"{where}.")
    for key in _ATTEMPT_OPT_STR:
        _opt(path, a, key, str, f"{where}.")
    _opt(path, a, "n_failed", int, f"{where}.")
    _opt(path, a, "stable", bool, f"{where}.")
    if a["verdict"] not in VERDICTS:
        raise UnrecordedDumpError(path, f"{where}.verdict: unknown verdict {a['verdict']!r}")
    runs = []
    for j, r in enumerate(a["runs"]):
        rwhere = f"{where}.runs[{j}]."
        if not isinstance(r, dict):
            raise UnrecordedDumpError(path, f"{rwhere[:-1]} should be an object")
        _check(path, r, _RUN, rwhere)
        for key, kind in _RUN_OPT.items():
            _opt(path, r, key, kind, rwhere)
        try:
            runs.append(run_from_json(r))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise UnrecordedDumpError(path, f"{rwhere[:-1]}: {exc}") from exc
    return DumpAttempt(
        dump_id=a["attempt_id"], config=RunConfig.from_json(a), label=a["label"], cache=a["cache"], runs=tuple(runs),
        stats=AttemptStats.from_json(a), verdict=a["verdict"], baseline_id=a.get("baseline_id"),
        speedup=a.get("speedup"), ci=(a.get("ci_low"), a.get("ci_high")),
        verdict_reason=a.get("verdict_reason") or "", ceiling_name=a.get("ceiling_name"),
        ceiling_gbps=a.get("ceiling_gbps"), notes=a.get("notes") or "")


def _check(path: Path, data: Mapping[str, Any], spec: Mapping[str, type], where: str) -> None:
    for key, kind in spec.items():
        if key not in data:
            raise UnrecordedDumpError(path, f"'{where}{key}' missing")
        _opt(path, data, key, kind, where)
        if data[key] is None:
            raise UnrecordedDumpError(path, f"'{where}{key}' is null")


def _opt(path: Path, data: Mapping[str, Any], key: str, kind: Any, where: str) -> None:
    value = data.get(key)
    if value is None:
        return
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:  # JSON true is no number
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise UnrecordedDumpError(path, f"'{where}{key}' should be {names}, got {type(value).__name__}")


def import_unrecorded(ledger: Ledger, path: str | os.PathLike[str], *,
                      campaign: str | None = None) -> list[Imported]:
    """Record every attempt of the dump at ``path`` that ``ledger`` does not hold in full (see the
    module's docstring); ``campaign`` is used only when the dump does not name one (older dumps).
    The dump is checked whole before anything is written."""
    dump = read_dump(path)
    name = dump.campaign or campaign or "default"
    known = ledger.attempts().to_dict("records")
    ids: dict[str, str] = {}  # dump attempt id -> ledger attempt id
    out = []
    for attempt in dump.attempts:
        match = _match(ledger, known, attempt, name)
        done = _record(ledger, dump, attempt, name, match, ids)
        ids[attempt.dump_id] = done.ledger_id
        out.append(done)
    return out


def _match(ledger: Ledger, known: list[dict[str, Any]], attempt: DumpAttempt, campaign: str) -> dict[str, Any] | None:
    for row in known:
        if row["id"] == attempt.dump_id:
            return row
    for row in known:
        if ((row["environment"] or {}).get("imported_from") or {}).get("attempt_id") == attempt.dump_id:
            return row
    keys = {_run_key(r) for r in attempt.runs if r.pid is not None}
    for row in known:
        if row["campaign"] == campaign and row["label"] == attempt.label and keys:
            if keys & _held(ledger, row["id"]):
                return row
    return None


def _record(ledger: Ledger, dump: Dump, attempt: DumpAttempt, campaign: str, match: dict[str, Any] | None,
            ids: Mapping[str, str]) -> Imported:
    if match is None:
        ledger_id, held, status = _start(ledger, dump, attempt, campaign), set(), "imported"
    else:
        ledger_id, status = match["id"], "completed"
        held = _held(ledger, ledger_id)
    missing = [r for r in attempt.runs if _run_key(r) not in held]
    if match is not None and not missing and match["auto_verdict"] == attempt.verdict \
            and _str(match["verdict_reason"]) == attempt.verdict_reason:
        return Imported(attempt.label, attempt.dump_id, ledger_id, "present", 0)
    for run in missing:
        ledger.add_run(ledger_id, run)
    line = (f"imported from {dump.path.name}: {len(missing)} of {len(attempt.runs)} runs added, statistics "
            "and verdict from the dump")
    earlier = _str((match or {}).get("notes"))
    notes = "\n".join(filter(None, [earlier, attempt.notes if attempt.notes not in earlier else "", line]))
    ledger.finish_attempt(ledger_id, attempt.stats, baseline_id=_baseline(ledger, attempt, ids),
                          speedup=attempt.speedup, verdict=attempt.verdict, ceiling_name=attempt.ceiling_name,
                          ceiling_gbps=attempt.ceiling_gbps, notes=notes, cache=attempt.cache, ci=attempt.ci,
                          verdict_reason=attempt.verdict_reason)
    return Imported(attempt.label, attempt.dump_id, ledger_id, status, len(missing))


def _start(ledger: Ledger, dump: Dump, attempt: DumpAttempt, campaign: str) -> str:
    config = attempt.config
    first = attempt.runs[0].report if attempt.runs else None
    device_info = dict((first.device_info if first is not None else None) or {"backend": config.device})
    engine = first.external if first is not None else None
    binary = {"path": engine.binary_path, "hash": engine.binary_hash} if engine and engine.binary_hash else None
    environment = {"host": dump.host, "device": device_info,
                   "imported_from": {"dump": str(dump.path), "attempt_id": attempt.dump_id}}
    return ledger.start_attempt(
        campaign=campaign, config=config, cache=attempt.cache, hypothesis=dump.hypothesis, label=attempt.label,
        file_identity=recorded_identity(config.file), environment=environment, device_info=device_info,
        host=dump.host, kind="external" if config.strategy == "external" else "strategy", binary=binary)


def _baseline(ledger: Ledger, attempt: DumpAttempt, ids: Mapping[str, str]) -> str | None:
    """The dump's baseline as this ledger knows it: imported just before, or already there."""
    base = attempt.baseline_id
    if base is None:
        return None
    if base in ids:
        return ids[base]
    try:
        return ledger.resolve_id(base) if len(base) >= 6 else None
    except WorkbenchError:
        return None


def _held(ledger: Ledger, attempt_id: str) -> set[tuple[int | None, int]]:
    """The (pid, position) of every run the ledger holds for an attempt."""
    return {(_int(r["pid"]), int(r["position"])) for r in ledger.runs(attempt_id).to_dict("records")}


def _run_key(run: RunRecord) -> tuple[int | None, int]:
    return run.pid, run.position


def _str(value: Any) -> str:
    return "" if value is None or value != value else str(value)


def _int(value: Any) -> int | None:
    return None if value is None or value != value else int(value)
