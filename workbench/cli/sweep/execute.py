"""Papermill sweeps: a YAML file names a notebook, a campaign, fixed parameters and a grid.

Each grid point (the cartesian product of the grid's lists) is one papermill execution whose output
notebook lands under ``data/runs/<campaign>/`` with a name derived from the point's parameters, so a
re-run finds it again: ``resume`` skips points whose output notebook completed. A failed point is
recorded in the ledger as a failed attempt (with its error) and the sweep goes on.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from workbench.settings import defaults
from workbench.cli.sweep.params import check_files_exist, check_types, path_parameters
from workbench.cli.sweep.plan import RunWatch, notebook_defaults, plan_point
from workbench.cli.sweep.grid import _SLUG_BAD, SweepPoint, describe_point, expand_grid  # noqa: F401 - the API
from workbench.cli.sweep.spec import (  # noqa: F401 - the sweep API, read from here by the CLI and tests
    Sweep, find_notebook, load_sweep, notebooks_dir,
)
from workbench.errors import SweepError, WorkbenchError
from workbench.output.outdir import OutDir
from workbench.output.files import claim_output, ledger_files, write_text
from workbench.records import campaign_name_problem

KERNEL_NAME = "python3"  # ipykernel's own kernel; present wherever the project's deps are installed
# Injected when the notebook declares them, so every point writes to the sweep's campaign and ledger.
INJECTED = ("campaign", "ledger_path", "hypothesis")


@dataclass(frozen=True)
class PointOutcome:
    """What became of one point: ``done``, ``skipped`` (resumed) or ``failed`` (with the error)."""

    point: SweepPoint
    status: str
    output: Path
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class SweepReport:
    """Every point's outcome, in grid order."""

    sweep: Sweep
    out_dir: Path
    outcomes: tuple[PointOutcome, ...]

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0


def point_completed(output: Path, ledger_id: str | None = None) -> bool:
    """Whether this output notebook carries the sweep's completion stamp (for ``ledger_id``: and
    recorded its attempts in that ledger — a deleted or different ledger means run it again).

    papermill's own metadata cannot tell: after a Ctrl-C it still writes ``end_time`` and marks the
    cells completed, so the sweep stamps a notebook only once papermill returned without an error.
    """
    try:
        meta = json.loads(output.read_text()).get("metadata", {})
    except (OSError, ValueError, AttributeError, RecursionError):  # not a notebook this sweep wrote
        return False
    stamp, papermill = (meta.get(k) if isinstance(meta, dict) else None for k in ("workbench", "papermill"))
    if not isinstance(stamp, dict) or (ledger_id is not None and stamp.get("ledger_id") != ledger_id):
        return False
    return bool(stamp.get("completed")) and not (papermill.get("exception") if isinstance(papermill, dict) else None)


def _stamp_completed(output: Path, point: SweepPoint, seconds: float, ledger_id: str) -> None:
    nb = json.loads(output.read_text())
    nb.setdefault("metadata", {})["workbench"] = {
        "completed": True, "sweep_point": point.name, "seconds": round(seconds, 3), "ledger_id": ledger_id}
    # atomic: a notebook is either stamped whole or not at all (a new file, never a link planted at a fixed name)
    write_text(output, json.dumps(nb, indent=1, ensure_ascii=False) + "\n", made=1)


def default_out_dir(campaign: str) -> Path:
    """``<data root>/runs/<campaign>`` (a campaign name that is no directory name is refused)."""
    problem = campaign_name_problem(campaign)
    if problem is not None:
        raise SweepError(campaign, problem)
    return defaults.runs_dir() / _SLUG_BAD.sub("-", campaign)


def run_sweep(
    sweep: Sweep, *, ledger_path: str | os.PathLike[str] | None = None, resume: bool = False,
    out_dir: str | os.PathLike[str] | None = None, progress: bool = True,
    kernel_name: str = KERNEL_NAME, on_point: Callable[[PointOutcome], None] | None = None,
) -> SweepReport:
    """Execute every point with papermill; failures are recorded and the sweep goes on.

    Parameters
    ----------
    sweep
        From :func:`load_sweep`.
    ledger_path
        The ledger every point records to (injected as ``ledger_path``); default the ledger's own.
    resume
        Skip points whose output notebook already completed.
    out_dir
        Where output notebooks go; default ``data/runs/<campaign>``.
    on_point
        Called after each point (done, skipped or failed), e.g. to print it.
    """
    from tqdm.auto import tqdm

    from workbench.ledger.schema import resolve_path

    points = expand_grid(sweep)  # counted and bounded before anything is checked, opened or created
    declared = check_parameters(sweep)
    kinds = path_parameters(sweep.notebook, [*sweep.parameters, *sweep.grid])
    check_files_exist(sweep.path, sweep.parameters, sweep.grid, kinds)  # a dry run may plan for files to come
    out = Path(out_dir) if out_dir is not None else default_out_dir(sweep.campaign)
    OutDir.open(out, made=1).close()  # the runs' directory is the workbench's: never reached through a link
    ledger = resolve_path(ledger_path).resolve()
    ledger_id = ledger_identity(ledger)
    outcomes = {p.index: PointOutcome(p, "skipped", p.output(out))
                for p in points if resume and point_completed(p.output(out), ledger_id)}
    for skipped in outcomes.values():
        if on_point:
            on_point(skipped)
    todo = [p for p in points if p.index not in outcomes]
    for point in todo:  # no notebook lands on the ledger, nor goes through a link planted in out
        claim_output(point.output(out), inputs=ledger_files(ledger), made=1)
    defaults = notebook_defaults(sweep.notebook)
    bar = tqdm(total=len(points), initial=len(outcomes), desc=f"sweep {sweep.campaign}", unit="point",
               disable=not progress, dynamic_ncols=True)
    try:
        for point in todo:
            bar.set_postfix_str(describe_point(point)[:60])
            injected = _injected(sweep, declared, ledger)
            with RunWatch(ledger, sweep.campaign, _total_runs(point, defaults), enabled=progress):
                outcome = _execute_point(sweep, point, out, injected, kernel_name, ledger_id)
            if outcome.status == "failed":
                _record_failed_point(sweep, outcome, ledger)
            outcomes[point.index] = outcome
            bar.update(1)
            if on_point:
                on_point(outcome)
    finally:
        bar.close()
    return SweepReport(sweep, out, tuple(outcomes[p.index] for p in points))


def _total_runs(point: SweepPoint, defaults: Mapping[str, Any]) -> int | None:
    try:
        plan = plan_point(point, defaults)
    except WorkbenchError:  # the point itself will fail and say why
        return None
    return plan.total_runs if plan is not None else None


def check_parameters(sweep: Sweep) -> set[str]:
    """The notebook's declared parameters, after refusing sweep keys it does not declare (a typo
    would otherwise run the notebook's defaults and look like a result), keys the sweep sets itself,
    and values of another type than the notebook's parameter takes."""
    specs = _declared_parameters(sweep.notebook)
    declared = set(specs)
    keys = set(sweep.parameters) | set(sweep.grid)
    unknown = sorted(keys - declared)
    if unknown:
        raise SweepError(sweep.path, f"{sweep.notebook.name} has no parameter(s) {', '.join(unknown)}; "
                                     f"it declares: {', '.join(sorted(declared))}")
    owned = sorted(keys & set(INJECTED))
    if owned:
        raise SweepError(sweep.path, f"{', '.join(owned)} are set by the sweep itself (top-level "
                                     "'campaign'/'hypothesis', and --ledger), not as parameters")
    check_types(sweep.path, sweep.notebook, specs, sweep.parameters, sweep.grid)
    return declared


def ledger_identity(path: Path) -> str:
    """The id of the ledger at ``path`` (created there if missing, as the points would create it)."""
    from workbench.ledger import Ledger

    with Ledger(path) as ledger:
        return ledger.ledger_id


def _declared_parameters(notebook: Path) -> dict[str, Any]:
    import papermill

    try:
        return dict(papermill.inspect_notebook(str(notebook)))
    except Exception as exc:  # a notebook papermill cannot read: say which one
        raise SweepError(notebook, f"papermill cannot read the notebook's parameters: {exc}") from exc


def _injected(sweep: Sweep, declared: set[str], ledger: Path) -> dict[str, Any]:
    values = {"campaign": sweep.campaign, "ledger_path": str(ledger), "hypothesis": sweep.hypothesis}
    return {k: values[k] for k in INJECTED if k in declared and (k != "hypothesis" or values[k])}


def _execute_point(sweep: Sweep, point: SweepPoint, out: Path, injected: Mapping[str, Any],
                   kernel_name: str, ledger_id: str) -> PointOutcome:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    output = point.output(out)
    start = time.monotonic()
    try:
        papermill.execute_notebook(
            str(sweep.notebook), str(output), parameters={**point.params, **injected},
            kernel_name=kernel_name, progress_bar=False, log_output=False, cwd=os.getcwd(),
            # ipykernel logs to stderr on every start (TCP warning) and stop (the SIGINT jupyter_client sends
            # before shutdown); both would tear the progress bar. Cell errors are in the output notebook.
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
        )
    except PapermillExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue} (cell {exc.exec_count})"
        return PointOutcome(point, "failed", output, time.monotonic() - start, error)
    except Exception as exc:  # a dead kernel or a timeout fails this point, not the sweep
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return PointOutcome(point, "failed", output, time.monotonic() - start, error)
    seconds = time.monotonic() - start
    _stamp_completed(output, point, seconds, ledger_id)
    return PointOutcome(point, "done", output, seconds)


def _record_failed_point(sweep: Sweep, outcome: PointOutcome, ledger_path: Path) -> str:
    """A failed point becomes a failed attempt in the ledger: its numbers are results too."""
    from workbench.ledger import Ledger
    from workbench.records import AttemptStats, RunConfig, RunRecord

    params = json.loads(json.dumps(dict(outcome.point.params), default=str))
    caches = params.get("caches") or [params.get("cache") or "asis"]
    cache = str(caches[0]) if isinstance(caches, list) and len(caches) == 1 else "asis"
    config = RunConfig(file=str(params.get("file", "")), strategy=f"notebook:{sweep.notebook.stem}",
                       params=params, device=str(params.get("device") or ""), label=outcome.point.name)
    # The point failed before (or while) measuring: its cache state was never tried, so not "not reached".
    run = RunRecord(position=0, pid=None, load_s=None, wall_s=outcome.seconds, bytes=0, resident_before=None,
                    cache_state=cache, cache_reached=None, verified=None, error=outcome.error)
    stats = AttemptStats(0, 1, None, None, None, None, None, stable=False)
    with Ledger(ledger_path) as ledger:
        attempt_id = ledger.start_attempt(campaign=sweep.campaign, config=config, cache=cache,
                                          hypothesis=sweep.hypothesis, label=outcome.point.name)
        ledger.add_run(attempt_id, run)
        ledger.finish_attempt(attempt_id, stats, baseline_id=None, speedup=None, verdict="failed",
                              notes=f"sweep point failed: {outcome.error}; notebook kept at {outcome.output}")
    return attempt_id
