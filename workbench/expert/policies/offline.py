"""What the offline policies know of the future: each access's next use (Belady) and each layer's most
used experts (static). Shared by the per-layer classes and the simulator, so both see the same ranks."""
from __future__ import annotations

import numpy as np

NEVER = np.iinfo(np.int64).max // 4  # the next use of an expert not used again


def next_use(seq: np.ndarray) -> np.ndarray:
    """For a ``(tokens, k)`` or ``(tokens, layers, k)`` routing, the flat position ``t * k + j`` at which
    access ``[t, ..., j]``'s expert is used next in its layer, or :data:`NEVER`; same shape as ``seq``."""
    seq = np.asarray(seq)
    flat = seq.reshape(seq.shape[0], -1, seq.shape[-1]).transpose(1, 0, 2).reshape(-1, seq.shape[0] * seq.shape[-1])
    n_layers, n = flat.shape
    out = np.full(flat.shape, NEVER, dtype=np.int64)
    for i in range(n_layers):
        order = np.lexsort((np.arange(n), flat[i]))  # by expert, then position
        same = flat[i][order[1:]] == flat[i][order[:-1]]
        out[i, order[:-1][same]] = order[1:][same]
    k = seq.shape[-1]
    return out.reshape(n_layers, seq.shape[0], k).transpose(1, 0, 2).reshape(seq.shape)


def hot_experts(seq: np.ndarray, n_experts: int, n: int) -> np.ndarray:
    """Per layer of a ``(tokens, layers, k)`` routing, a ``(layers, n_experts)`` mask of the ``n`` experts it
    routes most (ties: the lower id first)."""
    seq = np.asarray(seq)
    if seq.ndim == 2:
        seq = seq[:, None, :]
    layers = seq.shape[1]
    counts = np.zeros((layers, n_experts), dtype=np.int64)
    np.add.at(counts, (np.broadcast_to(np.arange(layers)[None, :, None], seq.shape), seq), 1)
    rank = np.argsort(-counts, axis=1, kind="stable")[:, :n]
    hot = np.zeros((layers, n_experts), dtype=bool)
    np.put_along_axis(hot, rank, True, axis=1)
    return hot
