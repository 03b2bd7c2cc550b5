"""The score policies (lru, fifo, lfu, belady) and static, vectorized: one row per (cache size, layer),
one step per token. The rules are :mod:`.layer`'s; what makes a whole token one step is that a token's
experts are pinned, so its misses' victims are the ``m`` lowest-scored resident experts outside it, in
whatever order the misses come (a victim's score never depends on the token being served)."""
from __future__ import annotations

import numpy as np

from workbench.expert.policies.offline import hot_experts, next_use

_INF = np.iinfo(np.int64).max


def run_scored(experts: np.ndarray, caps: np.ndarray, n_experts: int, kind: str, age_tokens: int = 0) -> np.ndarray:
    """Hits per row of a ``(tokens, layers, k)`` routing; row ``s * layers + l`` is layer ``l`` under a cache
    of ``caps[s * layers + l]`` experts; ``kind`` one of lru, fifo, lfu, belady."""
    tokens, layers, k = experts.shape
    rows = len(caps)
    r2 = np.arange(rows)[:, None]
    reps = rows // layers
    resident = np.zeros((rows, n_experts), dtype=bool)
    score = np.zeros((rows, n_experts), dtype=np.int64)  # lru/fifo: position; belady: -next use; lfu: last use
    uses = np.zeros((rows, n_experts), dtype=np.int64) if kind == "lfu" else None
    nxt = next_use(experts) if kind == "belady" else None
    n_res = np.zeros(rows, dtype=np.int64)
    hits = np.zeros(rows, dtype=np.int64)
    slots = np.arange(k)
    big = tokens * k + 1
    for t in range(tokens):
        req = np.tile(experts[t], (reps, 1))
        hit = resident[r2, req]
        hits += hit.sum(axis=1)
        pos = t * k + slots
        if kind == "lru":
            score[r2, req] = pos
        elif kind == "fifo":
            score[r2, req] = np.where(hit, score[r2, req], pos)
        elif kind == "belady":
            score[r2, req] = -np.tile(nxt[t], (reps, 1))
        else:
            if age_tokens and t and t % age_tokens == 0:
                uses //= 2
            uses[r2, req] = np.where(hit, uses[r2, req] + 1, 1)
            score[r2, req] = pos
        misses = k - hit.sum(axis=1)
        need = n_res + misses - caps
        if need.max() > 0:
            ranked = np.where(resident, score if uses is None else uses * big + score, _INF)
            ranked[r2, req] = _INF  # the token's own experts are pinned
            order = np.argsort(ranked, axis=1, kind="stable")[:, :k]
            take = slots[None, :] < need[:, None]
            resident[np.broadcast_to(r2, take.shape)[take], order[take]] = False
            n_res -= np.maximum(need, 0)
        resident[r2, req] = True
        n_res += misses
    return hits


def run_static(experts: np.ndarray, sizes: list[int], n_experts: int) -> np.ndarray:
    """Hits per row under static placement: an access hits when its expert is one of the layer's hot ones
    and was routed before (every cache starts empty); no token loop needed."""
    tokens, layers, k = experts.shape
    lidx = np.broadcast_to(np.arange(layers)[None, :, None], experts.shape)
    seen = np.zeros((layers, n_experts), dtype=bool)
    seen[lidx, experts] = True
    counts = np.zeros((layers, n_experts), dtype=np.int64)
    np.add.at(counts, (lidx, experts), 1)
    out = []
    for n in sizes:
        hot = hot_experts(experts, n_experts, n)
        # every routed hot expert misses once (its first use) and hits ever after
        out.append(((counts - 1) * (hot & seen)).sum(axis=1))
    return np.concatenate(out)
