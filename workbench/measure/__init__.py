"""Measurement: fresh worker per run, verified cache state, interleaving, device lock, verdicts, ceilings.

``measure(configs, ...)`` is the entry point; ``measure_engines`` times engine commands (A/B, interleaved)
up to a log marker and ``measure_external`` one of them; ``measure_ceilings`` records this machine's walls; ``measure_h2d`` the upload paths. Every
name is imported on first use, so a worker process (``python -m workbench.measure.worker``) pays only
for the modules it runs.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AttemptResult": "attempt", "DeviceLock": "lock", "interleave": "order", "measure": "runner",
    "measure_with": "runner", "measure_external": "external", "time_external": "external",
    "measure_engines": "external", "EngineCommand": "engine_command",
    "measure_ceilings": "ceilings", "Ceiling": "ceilings", "CeilingsReport": "ceilings",
    "measure_h2d": "h2d", "record_h2d": "h2d", "collect_environment": "environment",
    "verify_placements": "verify",
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
