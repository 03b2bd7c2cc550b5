"""ARC for the simulator: :class:`.layer.ArcLayer`'s rules as one tight loop per layer and cache size.

ARC adapts between a token's misses (its target ``p`` moves on every ghost hit), so it cannot take a
token as one vectorized step the way the score policies do (:mod:`.kernels`); a loop over plain dicts
(insertion-ordered: the first key is the least recent) runs at about a million lookups a second on
one core of a small VM — ``benchmarks/bench/bench_simulate.py`` says how fast on yours."""
from __future__ import annotations

import numpy as np


def _oldest(lst: dict, token: tuple) -> int | None:
    for e in lst:
        if e not in token:
            return e
    return None


def arc_layer_hits(seq: np.ndarray, c: int) -> int:
    """Hits of one layer's ``(tokens, k)`` routing under ARC with ``c`` experts, the token's experts pinned."""
    t1: dict = {}
    t2: dict = {}
    b1: dict = {}
    b2: dict = {}
    p = 0.0
    hits = 0
    for token in map(tuple, seq.tolist()):
        for x in token:
            if x in t1:
                del t1[x]
                t2[x] = None
                hits += 1
                continue
            if x in t2:
                del t2[x]
                t2[x] = None
                hits += 1
                continue
            in_b1, in_b2 = x in b1, x in b2
            replace = True
            if in_b1:
                p = min(float(c), p + max(len(b2) / len(b1), 1.0))
            elif in_b2:
                p = max(0.0, p - max(len(b1) / len(b2), 1.0))
            elif len(t1) + len(b1) == c:
                if len(t1) < c:
                    del b1[next(iter(b1))]
                else:
                    del t1[_oldest(t1, token)]
                    replace = False
            else:
                total = len(t1) + len(t2) + len(b1) + len(b2)
                if total == 2 * c:
                    del b2[next(iter(b2))]
                replace = total >= c
            if replace:
                n1 = len(t1)
                from_t1 = n1 >= 1 and ((in_b2 and n1 == p) or n1 > p)
                src, ghost = (t1, b1) if from_t1 else (t2, b2)
                victim = _oldest(src, token)
                if victim is None:
                    src, ghost = (t2, b2) if from_t1 else (t1, b1)
                    victim = _oldest(src, token)
                del src[victim]
                ghost[victim] = None
            if in_b1 or in_b2:
                del (b1 if in_b1 else b2)[x]
                t2[x] = None
            else:
                t1[x] = None
    return hits


def run_arc(experts: np.ndarray, caps: np.ndarray, n_experts: int) -> np.ndarray:
    """Hits per row of a ``(tokens, layers, k)`` routing (row ``s * layers + l``: layer ``l`` under ``caps[row]``)."""
    layers = experts.shape[1]
    return np.array([arc_layer_hits(experts[:, r % layers, :], int(c)) for r, c in enumerate(caps)], dtype=np.int64)
