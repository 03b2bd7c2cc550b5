"""Measurement: fresh worker per run, verified cache state, interleaving, device lock, verdicts, ceilings.

``measure(configs, ...)`` is the entry point; ``measure_engines`` times engine commands (A/B, interleaved)
up to a log marker and ``measure_external`` one of them; ``measure_ceilings`` records this machine's walls; ``measure_h2d`` the upload paths. Every
name is imported on first use, so a worker process (``python -m workbench.measure.run.worker``) pays only
for the modules it runs.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AttemptResult": "run.attempt", "DeviceLock": "lock.device", "interleave": "run.order",
    "measure": "run.runner", "measure_with": "run.runner", "measure_external": "engine.external",
    "time_external": "engine.external", "measure_engines": "engine.external", "EngineCommand": "engine.command",
    "measure_ceilings": "ceilings.walls", "Ceiling": "ceilings.walls", "CeilingsReport": "ceilings.walls",
    "measure_h2d": "ceilings.h2d", "record_h2d": "ceilings.h2d", "collect_environment": "run.environment",
    "verify_placements": "run.verify",
}
_RECORDS = ("AttemptStats", "RunConfig", "RunRecord")  # the data model, re-exported for convenience

__all__ = sorted([*_LAZY, *_RECORDS])


def __getattr__(name: str) -> Any:
    if name in _RECORDS:
        module = importlib.import_module("workbench.records")
    elif name in _LAZY:
        module = importlib.import_module(f"workbench.measure.{_LAZY[name]}")
    else:
        raise AttributeError(f"module 'workbench.measure' has no attribute {name!r}")
    return getattr(module, name)
