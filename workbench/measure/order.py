"""The order in which an interleaved comparison runs its configurations."""
from __future__ import annotations

import random

ORDERS = ("abab", "shuffle")


def interleave(n_configs: int, runs: int, order: str = "abab", seed: int = 0) -> list[int]:
    """Config indexes in run order: ``abab`` cycles A B C A B C …; ``shuffle`` is a seeded permutation.

    Interleaving spreads slow drift (thermal, a neighbour's job, the disk's mood) over every config
    instead of handing it to whichever ran last. Each config appears exactly ``runs`` times.
    """
    if n_configs < 1 or runs < 1:
        raise ValueError(f"need at least one config and one run, got {n_configs} configs × {runs} runs")
    cycle = [i for _ in range(runs) for i in range(n_configs)]
    if order == "abab":
        return cycle
    if order == "shuffle":
        random.Random(seed).shuffle(cycle)
        return cycle
    raise ValueError(f"unknown order {order!r}; known: {', '.join(ORDERS)}")
