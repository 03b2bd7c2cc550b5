"""Loads across several ranks, one row per rank per run (``ranks.csv``, the per-rank figure): each rank's
time on the run's one clock, its bytes read, moved over the interconnect and held, its verification, and
how it stands against the median rank (the slowest rank is the run's result)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import pandas as pd

from workbench.records import RanksSummary

if TYPE_CHECKING:
    from workbench.ledger.store import Ledger

RANK_COLUMNS = ("attempt_id", "position", "rank", "world", "layout", "strategy", "load_s", "start_after_s",
                "end_after_s", "vs_median", "slowest", "bytes_read", "bytes_interconnect", "bytes_held",
                "verified", "verify_detail", "device", "transport", "pid")


def rank_rows(result: Any) -> list[dict[str, Any]]:
    """A run's ``result`` (the ledger's JSON) → one row per rank; [] for a single-process run."""
    ranks = result.get("ranks") if isinstance(result, Mapping) else None
    if not isinstance(ranks, Mapping) or not ranks.get("ranks"):
        return []
    summary = RanksSummary.from_json(ranks)
    first, median, slow = min(r.start for r in summary.ranks), summary.median_rank_s, summary.slowest.rank
    return [{"rank": r.rank, "world": r.world, "layout": summary.layout, "strategy": summary.strategy,
             "load_s": r.load_s, "start_after_s": r.start - first, "end_after_s": r.end - first,
             "vs_median": r.load_s / median if median > 0 else None, "slowest": r.rank == slow,
             "bytes_read": r.bytes_read, "bytes_interconnect": r.bytes_interconnect, "bytes_held": r.bytes_held,
             "verified": r.verified, "verify_detail": r.verify_detail, "device": r.device,
             "transport": r.transport, "pid": r.pid} for r in summary.ranks]


def ranks_frame(ledger: Ledger, campaign: str | None = None) -> pd.DataFrame:
    """Every rank of every multi-rank run (of one campaign), in attempt, run and rank order."""
    runs = ledger.runs(campaign=campaign)
    rows = [{"attempt_id": a, "position": p, **row}
            for a, p, result in zip(runs["attempt_id"], runs["position"], runs["result"]) for row in rank_rows(result)]
    return pd.DataFrame(rows, columns=list(RANK_COLUMNS))
