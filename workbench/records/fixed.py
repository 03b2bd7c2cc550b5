"""A load's time in two parts (DESIGN, "Measuring honestly"): the fixed part, paid whatever the model's
size — reading the index, the residency probe, the device allocation, provisioning staging, starting
the readers, releasing the staging — and the streaming part, the rest of the window (bytes ÷ rate).
A small load's GB/s is explained by its fixed part; a large one's by its streaming part.

Taken from what a run recorded: the ``index`` and ``prefetch`` phases, and the counters a staged
strategy keeps (``alloc_us``, ``provision_us``, ``first_read_us``, ``unstage_us``; without them, a
strategy's whole ``staging`` phase counts as provisioning).
"""
from __future__ import annotations

from typing import Mapping

FIXED_PARTS = ("index", "probe", "alloc", "staging", "start", "release")


def fixed_parts(phases: Mapping[str, float], counters: Mapping[str, int]) -> dict[str, float]:
    """Seconds per part of the fixed cost (:data:`FIXED_PARTS`), from one run's phases and counters."""
    us = lambda key: float(counters.get(key, 0) or 0) / 1e6  # noqa: E731
    staged = "provision_us" in counters
    return {"index": float(phases.get("index", 0.0)), "probe": float(phases.get("prefetch", 0.0)),
            "alloc": us("alloc_us"), "staging": us("provision_us") if staged else float(phases.get("staging", 0.0)),
            "start": us("first_read_us"), "release": us("unstage_us")}


def split_load(window_s: float, phases: Mapping[str, float], counters: Mapping[str, int]) -> tuple[float, float]:
    """(fixed seconds, streaming seconds) of a load window of ``window_s``."""
    fixed = min(window_s, sum(fixed_parts(phases, counters).values()))
    return fixed, window_s - fixed
