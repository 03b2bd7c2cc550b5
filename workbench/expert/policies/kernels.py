"""The score policies (lru, fifo, lfu, belady) and static, vectorized: one row per (cache size, layer),
one step per token. The rules are :mod:`.layer`'s; what makes a whole token one step is that a token's
experts are pinned, so its misses' victims are the ``m`` lowest-scored resident experts outside it, in
whatever order the misses come (a victim's score never depends on the token being served)."""
from __future__ import annotations

import numpy as np

from workbench.expert.policies.offline import hot_experts, next_use

_INF = np.iinfo(np.int64).max
_CHUNK = 1 << 20  # routed ids laid out ahead at a time (tokens x rows x k): bounded memory for long traces


def run_scored(experts: np.ndarray, caps: np.ndarray, n_experts: int, kind: str, age_tokens: int = 0) -> np.ndarray:
    """Hits per row of a ``(tokens, layers, k)`` routing; row ``s * layers + l`` is layer ``l`` under a cache
    of ``caps[s * layers + l]`` experts; ``kind`` one of lru, fifo, lfu, belady."""
    tokens, layers, k = experts.shape
    rows = len(caps)
    base = (np.arange(rows, dtype=np.int64) * n_experts)[:, None]  # state is flat: row * n_experts + expert
    resident = np.zeros(rows * n_experts, dtype=bool)
    score = np.zeros(rows * n_experts, dtype=np.int64)  # lru/fifo: position; belady: -next use; lfu: last use
    uses = np.zeros(rows * n_experts, dtype=np.int64) if kind == "lfu" else None
    nxt = next_use(experts) if kind == "belady" else None
    n_res = np.zeros(rows, dtype=np.int64)
    hits = np.zeros((rows, k), dtype=np.int64)
    slots = np.arange(k)
    big = tokens * k + 1
    step = max(1, _CHUNK // (rows * k))
    for c0 in range(0, tokens, step):
        flat = np.tile(experts[c0:c0 + step], (1, rows // layers, 1)) + base  # (n, rows, k)
        for t in range(c0, min(tokens, c0 + step)):
            f = flat[t - c0]
            hit = resident[f]
            hits += hit
            pos = t * k + slots
            if kind == "lru":
                score[f] = pos
            elif kind == "fifo":
                score[f] = np.where(hit, score[f], pos)
            elif kind == "belady":
                score[f] = -np.tile(nxt[t], (rows // layers, 1))
            else:
                if age_tokens and t and t % age_tokens == 0:
                    uses //= 2
                uses[f] = np.where(hit, uses[f] + 1, 1)
                score[f] = pos
            misses = k - hit.sum(axis=1)
            need = n_res + misses - caps
            if need.max() > 0:
                _evict(resident, score if uses is None else uses * big + score, f, need, base, n_experts, k)
                n_res -= np.maximum(need, 0)
            resident[f] = True
            n_res += misses
    return hits.sum(axis=1)


def _evict(resident: np.ndarray, score: np.ndarray, pinned: np.ndarray, need: np.ndarray, base: np.ndarray,
           n_experts: int, k: int) -> None:
    """Per row, clear the ``need`` lowest-scored resident experts that are not ``pinned`` (the token's)."""
    ranked = np.where(resident, score, _INF)
    ranked[pinned] = _INF
    ranked = ranked.reshape(-1, n_experts)
    if n_experts > 4 * k:  # the k lowest first, then only those sorted
        part = np.argpartition(ranked, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(part, np.argsort(np.take_along_axis(ranked, part, 1), axis=1, kind="stable"), 1)
    else:
        order = np.argsort(ranked, axis=1, kind="stable")[:, :k]
    take = np.arange(k)[None, :] < need[:, None]
    resident[(order + base)[take]] = False


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
