"""An effect as a reviewer reads it: a speedup with its confidence interval and the verdict it earns
(and the attempt's spread, formatted the one way every table shows it).

Computed by :func:`workbench.measure.run.effect.ratio_effect`; stored by the ledger (``speedup``,
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


CLAIM_MIN_RUNS = 5  # runs a side a faster/slower verdict needs to be a claim (README, "Measuring honestly")
# the verdicts that claim a direction: a load's faster/slower, a session A/B metric's higher/lower
CLAIMS = ("faster", "slower", "higher", "lower")


def verdict_n(n: Any, baseline_n: Any, environment: Any = None) -> int | None:
    """The runs per side behind a verdict against a baseline: the smaller side's successful runs
    (None without a baseline to compare with). A session A/B cell's verdict rests on the A/B's paired
    rounds, which its ``environment`` records (``{"ab": {"rounds": R}}``), not on its turns (its ``n``)."""
    if _missing(n) or _missing(baseline_n):
        return None
    ab = environment.get("ab") if isinstance(environment, dict) else None
    rounds = ab.get("rounds") if isinstance(ab, dict) else None
    if isinstance(rounds, int) and not isinstance(rounds, bool):
        return rounds
    return int(min(n, baseline_n))


def verdict_caveat(verdict: str | None, n: Any) -> str:
    """``(n=3 < 5: not a claim)`` for a verdict that claims a direction (faster/slower, a session
    A/B's higher/lower) from fewer than 5 runs (or paired rounds) a side, else ''. The one rule every
    surface uses."""
    if verdict not in CLAIMS or _missing(n) or n >= CLAIM_MIN_RUNS:
        return ""
    return f"(n={int(n)} < {CLAIM_MIN_RUNS}: not a claim)"


def format_verdict(verdict: str | None, auto: str | None = None, n: Any = None) -> str:
    """A verdict the one way every table, export, report and notebook shows it: the measured one with
    its caveat (``faster (n=3 < 5: not a claim)``), and a person's verdict beside the measured one
    (``kept · auto: inconclusive``). ``n`` is :func:`verdict_n`."""
    auto = None if _missing(auto) else auto
    verdict = None if _missing(verdict) else verdict
    measured = auto or verdict or "—"
    text = " ".join(filter(None, [measured, verdict_caveat(measured, n)]))
    if verdict and auto and verdict != auto:
        return f"{verdict} · auto: {text}"
    return text


def keeping_needs_a_note(auto: str | None, n: Any) -> str:
    """Why keeping an attempt needs a person's reason (what it measured: ``inconclusive``, ``slower``,
    ``failed``, ``faster (n=3 < 5: not a claim)``), or '' when its measurement is a claim to keep."""
    if auto in ("inconclusive", "slower", "failed"):
        return str(auto)
    caveat = verdict_caveat(auto, n)
    return f"{auto} {caveat}" if caveat else ""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)
