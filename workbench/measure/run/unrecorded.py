"""Where a measurement goes when the ledger stops taking writes: a JSON file, so nothing measured is lost.

The ledger's own directory comes first (it is where one would look), then the temporary directory,
then the working directory: a full disk or a read-only file system under the ledger usually leaves
one of the others writable. The file holds every attempt as ``--json`` prints it, each marked with
whether the ledger has all of it, each run with its whole report (``result``), and the campaign and
hypothesis they were measured for: ``workbench ledger import-unrecorded`` records it all later
(:mod:`workbench.measure.run.unrecorded_import`).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from workbench.errors import LedgerError, UnrecordedResults
from workbench.measure.run.attempt import AttemptResult
from workbench.output.owned import make_owned
from workbench.records import AttemptStats

if TYPE_CHECKING:
    from workbench.ledger import Ledger

# per attempt: its ledger id (None: never opened), finished there, runs recorded there, statistics
Kept = tuple[str | None, bool, int, AttemptStats]


def give_up(ledger: Ledger, lost: LedgerError | None, results: Sequence[AttemptResult],
            kept: Sequence[Kept], *, campaign: str | None = None, hypothesis: str = "") -> UnrecordedResults:
    """After a failed ledger write: save every result, close the attempts the ledger opened but could
    not finish as failed (when it takes writes again; else a reader reaps them once this process is
    gone), and return the one error that says where everything is."""
    cause = lost.detail if lost is not None else "unknown"
    payload = unrecorded_payload(ledger.path, cause, results, campaign=campaign, hypothesis=hypothesis)
    dump = save_unrecorded(ledger.path, payload)
    where = f"; every run saved in {dump}" if dump else ""
    for attempt_id, finished, _, stats in kept:
        if attempt_id is not None and not finished:
            with contextlib.suppress(Exception):  # noqa: BLE001 - the ledger may well refuse again
                ledger.finish_attempt(attempt_id, stats, baseline_id=None, speedup=None, verdict="failed",
                                      notes=f"ledger write failed mid-attempt: {cause}{where}",
                                      verdict_reason="ledger write failed")
    total = sum(len(r.runs) for r in results)
    missing = total - sum(recorded for _, _, recorded, _ in kept)
    return UnrecordedResults(ledger.path, cause, list(results), None if dump is None else str(dump),
                             missing, total)


def unrecorded_payload(ledger_path: Path, cause: str, results: Sequence[AttemptResult], *,
                       campaign: str | None = None, hypothesis: str = "") -> dict[str, Any]:
    """The dump's content: which ledger refused what, and every attempt with its runs (each run's whole
    report under ``result``, so that importing the dump records the run as the runner would have)."""
    from workbench.settings.defaults import host_id

    payload: dict[str, Any] = {
        "ledger": str(ledger_path), "error": cause, "host": host_id(), "pid": os.getpid(),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "attempts": [_attempt_json(r) for r in results]}
    if campaign is not None:
        payload.update(campaign=campaign, hypothesis=hypothesis)
    return payload


def _attempt_json(result: AttemptResult) -> dict[str, Any]:
    out = result.to_json()
    for run_json, run in zip(out["runs"], result.runs):
        run_json["result"] = run.report.to_json()
    return out


PARTIAL = ".workbench-unrecorded-"  # a dump being written: owner-named, reaped once its writer is gone


def save_unrecorded(ledger_path: Path, payload: dict[str, Any]) -> Path | None:
    """Write ``payload`` to the first of the candidate directories that takes it; None if none does.

    The dump is written under an owner-named partial name (:mod:`workbench.output.owned`), synced, then linked
    to its final name (which never exists half-written: a run killed in the write leaves only the
    partial, which the next dump into that directory removes) and the partial name unlinked."""
    text = json.dumps(payload, indent=1, default=str) + "\n"
    name = f"workbench-unrecorded-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}.json"
    for directory in _candidates(ledger_path):
        try:
            fd, partial = make_owned(directory, PARTIAL, ".partial")
        except OSError:
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(partial, 0o644)
            _publish(partial, directory / name)
            return directory / name
        except OSError:  # full, past the file-size limit, or the name taken: a partial dump is no dump
            continue
        finally:
            _remove(Path(partial))
    return None


def _publish(partial: str, final: Path) -> None:
    """Give the written ``partial`` its ``final`` name, never replacing a file of that name (a link,
    or a rename where the file system has no links)."""
    try:
        os.link(partial, final)
    except FileExistsError:
        raise
    except OSError:
        if os.path.lexists(final):
            raise FileExistsError(final) from None
        os.rename(partial, final)


def _candidates(ledger_path: Path) -> list[Path]:
    seen: list[Path] = []
    for directory in (ledger_path.expanduser().resolve().parent, Path(tempfile.gettempdir()), Path.cwd()):
        if directory not in seen:
            seen.append(directory)
    return seen


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
