"""Measurement: fresh worker per run, verified cache state, interleaving, device lock, verdicts, ceilings.

``measure(configs, ...)`` is the entry point; ``measure_external`` times another engine up to a log
marker; ``measure_ceilings`` records this machine's walls. Everything here imports lazily, so a worker
process pays only for what it uses.
"""
from __future__ import annotations

from workbench.measure.attempt import AttemptResult
from workbench.measure.lock import DeviceLock
from workbench.measure.order import interleave
from workbench.records import AttemptStats, RunConfig, RunRecord
from workbench.measure.runner import measure, measure_with

__all__ = ["AttemptResult", "AttemptStats", "Ceiling", "CeilingsReport", "DeviceLock", "RunConfig",
           "RunRecord", "interleave", "measure", "measure_ceilings", "measure_external", "measure_with",
           "time_external"]


def __getattr__(name: str):  # external and ceilings pull in pty/numpy: load them on first use
    if name in ("measure_external", "time_external"):
        from workbench.measure import external

        return getattr(external, name)
    if name in ("measure_ceilings", "Ceiling", "CeilingsReport"):
        from workbench.measure import ceilings

        return getattr(ceilings, name)
    raise AttributeError(f"module 'workbench.measure' has no attribute {name!r}")
