"""What a sweep point will measure, how long that should take, and a bar of its runs as they land.

A load-sweep point (a notebook taking ``strategies``, ``caches`` and ``runs``, like 01) measures every
strategy × parameter grid in every cache state, ``runs`` times: :func:`plan_point` counts that from
the point's parameters over the notebook's own defaults. :class:`RunHistory` estimates the time from
the ledger's recorded runs (median whole-process wall time per strategy, file and cache state).
:class:`RunWatch` polls the ledger while papermill runs the point in its kernel, so the progress bar
moves run by run rather than point by point.
"""
from __future__ import annotations

import ast
import os
import statistics
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.cli.sweep.grid import SweepPoint

POLL_S = 0.5


@dataclass(frozen=True)
class PointPlan:
    """What one point measures: configurations (× cache states), runs of each, and what they are."""

    configs: int
    runs: int
    keys: tuple[tuple[str, str, str, int], ...] = ()  # (strategy, file, cache, its configurations)

    @property
    def total_runs(self) -> int:
        return self.configs * self.runs

    def describe(self) -> str:
        return f"{self.configs} configs × {self.runs} runs = {self.total_runs} runs"


def notebook_defaults(notebook: Path) -> dict[str, Any]:
    """The notebook's parameters cell values (those that are Python literals)."""
    import papermill

    out = {}
    for name, info in papermill.inspect_notebook(str(notebook)).items():
        try:
            out[name] = ast.literal_eval(info.get("default", ""))
        except (ValueError, SyntaxError):
            continue
    return out


def plan_point(point: SweepPoint, defaults: Mapping[str, Any]) -> PointPlan | None:
    """The point's configurations and runs, for a load-sweep notebook; None for any other notebook."""
    from workbench.cli.notebooks.actions import DEFAULT_MODEL, count_configs, model_path

    values = {**defaults, **point.params}
    if not {"strategies", "caches", "runs"} <= set(values):
        return None
    file = str(values.get("file") or model_path(*DEFAULT_MODEL))
    counts = count_configs(list(values["strategies"]), values.get("params") or {})  # counted, never made
    caches = list(values["caches"])
    real = os.path.realpath(file)  # as the ledger records a file
    keys = tuple((strategy, real, cache, n) for cache in caches for strategy, n in counts)
    return PointPlan(sum(n for *_, n in keys), int(values["runs"]), keys)


def describe_plan(point: SweepPoint, defaults: Mapping[str, Any], history: RunHistory | None) -> str:
    """``7 configs × 5 runs = 35 runs, ≈ 42 s`` (or why there is no estimate) for a dry run."""
    try:
        plan = plan_point(point, defaults)
    except WorkbenchError as exc:
        return f"cannot plan: {exc}"
    if plan is None:
        values = {**defaults, **point.params}
        if {"turns", "tokens"} <= set(values):  # a session notebook (04, 07): one process a session, no run estimate
            return f"sessions of {values['turns']} turns × {values['tokens']} tokens (not a load sweep: no estimate)"
        return "runs: not a load sweep"
    estimate = history.estimate(plan) if history is not None else None
    if estimate is None:
        return f"{plan.describe()}, no recorded runs to estimate the time from"
    seconds, known = estimate
    return f"{plan.describe()}, ≈ {_duration(seconds)} ({known}/{plan.configs} configs from recorded runs)"


class RunHistory:
    """Median wall time of a run by (strategy, file, cache state), from a ledger's recorded runs."""

    def __init__(self, ledger: Any):
        attempts = ledger.attempts()[["id", "strategy", "file_path"]].rename(columns={"id": "attempt_id"})
        runs = ledger.runs()
        runs = runs[runs["error"].isna() & runs["wall_s"].notna()][["attempt_id", "cache_state", "wall_s"]]
        merged = runs.merge(attempts, on="attempt_id")
        self.by_config = {k: statistics.median(g["wall_s"]) for k, g in
                          merged.groupby(["strategy", "file_path", "cache_state"])}
        self.by_file = {k: statistics.median(g["wall_s"]) for k, g in merged.groupby(["file_path", "cache_state"])}

    def estimate(self, plan: PointPlan) -> tuple[float, int] | None:
        """(seconds of runs, configurations estimated from their own history) or None with no history:
        a configuration never run is taken at the median of that file and state."""
        total, known = 0.0, 0
        for strategy, file, cache, n in plan.keys:
            wall = self.by_config.get((strategy, file, cache))
            known += n if wall is not None else 0
            wall = wall if wall is not None else self.by_file.get((file, cache))
            if wall is None:
                return None
            total += wall * plan.runs * n
        return total, known


class RunWatch:
    """A second progress bar counting the runs a point records in the ledger, polled from a thread."""

    def __init__(self, ledger_path: Path, campaign: str, total: int | None, enabled: bool = True):
        from tqdm.auto import tqdm

        from workbench.ledger.schema import now

        self.path, self.campaign, self.since = ledger_path, campaign, now()
        self.bar = tqdm(total=total, desc="  runs", unit="run", position=1, leave=False, disable=not enabled,
                        dynamic_ncols=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="sweep-run-watch", daemon=True)

    def __enter__(self) -> RunWatch:
        if not self.bar.disable:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.bar.close()

    def _poll(self) -> None:
        from workbench.ledger import Ledger

        with Ledger(self.path, readonly=True) as ledger:  # its own connection: SQLite's are per thread
            while not self._stop.wait(POLL_S):
                done = ledger.count_runs(self.campaign, self.since)
                if done != self.bar.n:
                    self.bar.update(done - self.bar.n)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"
