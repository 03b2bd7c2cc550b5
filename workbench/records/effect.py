"""An effect as a reviewer reads it: a speedup with its confidence interval and the verdict it earns
(and the attempt's spread, formatted the one way every table shows it).

Computed by :func:`workbench.measure.effect.ratio_effect`; stored by the ledger (``speedup``,
``ci_low``, ``ci_high``, ``verdict``, ``verdict_reason``) and formatted the same way everywhere.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Effect:
    """``speedup [ci_low–ci_high]`` (baseline median / candidate median) and what it means.

    ``ci_low``/``ci_high`` are None when there is no interval (too few runs); ``method`` says how the
    runs were resampled: ``paired rounds``, ``independent runs`` or ``""`` when nothing was."""

    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str  # faster | slower | inconclusive
    reason: str  # why, in a few words: "interval excludes 1", "n < 3", "effect under the 2% minimum"
    method: str = ""

    def __str__(self) -> str:
        return format_effect(self.speedup, self.ci_low, self.ci_high)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def format_effect(speedup: float | None, low: float | None = None, high: float | None = None) -> str:
    """``1.14× [1.05–1.22]``; slower reads the same way, ``0.81× [0.77–0.86]``; ``1.14×`` without an
    interval; ``—`` without a speedup."""
    if speedup is None or speedup != speedup:  # None or NaN (a pandas cell)
        return "—"
    if low is None or high is None or low != low or high != high:
        return f"{speedup:.2f}×"
    return f"{speedup:.2f}× [{low:.2f}–{high:.2f}]"


def format_spread(spread_pct: float | None, n: int | None, stable: bool | None = None) -> str:
    """An attempt's run-to-run spread as tables show it: ``4.2 %``, ``12.0 % ⚠`` above 10 %, and ``— ⚠``
    for a single run (one run measures no spread: never ``0.0 %``); ``—`` without runs."""
    if n is None or n != n or n < 1:  # None or NaN (a pandas cell)
        return "—"
    if n == 1:
        return "— ⚠"
    if spread_pct is None or spread_pct != spread_pct:
        return "—"
    loud = spread_pct > 10.0 if stable is None or stable != stable else not stable
    return f"{spread_pct:.1f} %" + (" ⚠" if loud else "")
