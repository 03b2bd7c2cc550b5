"""Ranked strategies: how a checkpoint's bytes reach several ranks (a registry, as the single-process
strategies'), and the layouts that say which bytes each rank holds (``layout.py``).

Adding one is one module built on :mod:`workbench.strategies.ranked.base` and one line in ``RANKED``;
the rank runner (``measure/ranks/``) never names a strategy.
"""
from __future__ import annotations

from workbench.registry import Registry
from workbench.strategies.ranked.base import RankContext, RankedStrategy
from workbench.strategies.ranked.layout import LAYOUTS, RankPlan, RankSlice, plan_rank

RANKED: Registry[RankedStrategy] = Registry(
    "ranked strategy",
    {
        "whole": ("workbench.strategies.ranked.whole:WholeStrategy", ""),
        "ranges": ("workbench.strategies.ranked.ranges:RangesStrategy", ""),
        "shm": ("workbench.strategies.ranked.shm:ShmStrategy", ""),
        "scatter": ("workbench.strategies.ranked.scatter:ScatterStrategy", "pip install torch"),
    },
)


def get_ranked(name: str) -> type[RankedStrategy]:
    """The ranked strategy registered as ``name`` (imported now)."""
    return RANKED.get(name)


__all__ = ["LAYOUTS", "RANKED", "RankContext", "RankPlan", "RankSlice", "RankedStrategy", "get_ranked", "plan_rank"]
