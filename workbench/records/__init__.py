"""The data model at the bottom of the workbench: what a run and an attempt are, what a worker
reports, whether a fast path engaged, and the units and names every layer shares.

Every layer may import it; it imports nothing of the workbench (not even its errors), so a record
means the same thing to the worker, the runner, the ledger and the notebooks.
"""
from __future__ import annotations

from workbench.records.cache_recheck import CacheRecheck
from workbench.records.costs import COST_FIELDS, RunCosts
from workbench.records.effect import (
    CLAIM_MIN_RUNS,
    Effect,
    format_effect,
    format_spread,
    format_verdict,
    keeping_needs_a_note,
    verdict_caveat,
    verdict_n,
)
from workbench.records.engaged import Engaged
from workbench.records.fixed import FIXED_PARTS, fixed_parts, split_load
from workbench.records.external import BinaryFile, EnginePhase, ExternalRun, ReadEvidence
from workbench.records.model_names import model_display_name
from workbench.records.names import campaign_name_problem
from workbench.records.ranks import RankReport, RanksSummary
from workbench.records.run import (
    AUTO_VERDICTS,
    CACHE_STATES,
    USER_VERDICTS,
    VERDICTS,
    AttemptStats,
    RunConfig,
    RunRecord,
    failure_reason,
)
from workbench.records.settings import comparable_settings, format_differences, settings_differences
from workbench.records.units import PHASES, MiB, plural
from workbench.records.worker_report import (
    LoadPath,
    LoadSummary,
    Timings,
    VerifySummary,
    WorkerReport,
)

__all__ = [
    "COST_FIELDS", "RunCosts", "AUTO_VERDICTS", "CACHE_STATES", "CLAIM_MIN_RUNS", "PHASES", "USER_VERDICTS", "VERDICTS",
    "AttemptStats", "BinaryFile", "CacheRecheck", "Effect", "Engaged", "EnginePhase", "ExternalRun", "LoadPath", "LoadSummary", "MiB",
    "RankReport", "RanksSummary", "ReadEvidence", "RunConfig", "RunRecord", "Timings", "VerifySummary", "WorkerReport", "campaign_name_problem",
    "failure_reason", "format_effect", "format_spread", "format_verdict", "keeping_needs_a_note", "verdict_caveat",
    "verdict_n", "comparable_settings", "format_differences", "model_display_name", "plural", "settings_differences",
    "FIXED_PARTS", "fixed_parts", "split_load",
]
