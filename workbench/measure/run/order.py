"""The order in which an interleaved comparison runs its configurations."""
from __future__ import annotations

import random

ORDERS = ("abba", "abab", "shuffle")
DEFAULT_ORDER = "abba"
MAX_RUNS = 1_000  # runs (rounds) of one comparison: a claim needs 5, a careful one 10–30 (the CLI's bound too)


def interleave(n_configs: int, runs: int, order: str = DEFAULT_ORDER, seed: int = 0) -> list[int]:
    """Config indexes in run order; each config appears exactly ``runs`` times, once per round.

    - ``abba`` (the default) alternates the direction of each round: A B C, C B A, A B C, … With
      ``abab`` B always runs one step after A, so a steady drift (a disk warming up, a neighbour's job
      ramping) becomes a constant bias between them, and pairing the rounds makes that bias look
      *significant*; alternating turns it into a bias that changes sign every round and cancels in
      pairs. README "Measuring honestly" has the numbers.
    - ``abab`` cycles A B C A B C …;
    - ``shuffle`` is a seeded permutation within each round (round k still holds the k-th run of
      every config, so rounds can be paired).
    """
    if n_configs < 1 or runs < 1:
        raise ValueError(f"need at least one config and one run, got {n_configs} configs × {runs} runs")
    if runs > MAX_RUNS:  # the order is a list made up front: a notebook's or a sweep's runs = 10**9 made 10**9
        raise ValueError(f"{runs:,} runs of each configuration: more than the {MAX_RUNS:,} a comparison may make")
    forward = list(range(n_configs))
    if order == "abba":
        return [i for r in range(runs) for i in (forward if r % 2 == 0 else forward[::-1])]
    if order == "abab":
        return forward * runs
    if order == "shuffle":
        rng = random.Random(seed)
        return [i for _ in range(runs) for i in rng.sample(forward, n_configs)]
    raise ValueError(f"unknown order {order!r}; known: {', '.join(ORDERS)}")
