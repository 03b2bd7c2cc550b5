"""A :class:`Trace` from the rows a reader parsed: one expert a row (CSV, ``(N, 3)`` arrays) or one
(token, layer) record of ``k`` experts (JSONL, ``[tokens, layers, k]`` arrays), checked in one line."""
from __future__ import annotations

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.trace import Trace, frozen


def trace_from_rows(path: str, pos: np.ndarray, layer: np.ndarray, expert: np.ndarray) -> Trace:
    """One expert per row; a (token, layer)'s experts keep the file's order."""
    if not len(pos):
        raise TraceError(path, "empty trace: no token,layer,expert rows")
    order = np.lexsort((np.arange(len(pos)), pos, layer))
    lay, tok, exp = layer[order], pos[order], expert[order]
    starts = np.flatnonzero(np.r_[True, (lay[1:] != lay[:-1]) | (tok[1:] != tok[:-1])])
    counts = np.diff(np.r_[starts, len(pos)])
    k = int(counts[0])
    odd = np.flatnonzero(counts != k)
    if len(odd):
        g = int(odd[0])
        raise TraceError(path, f"token {int(tok[starts[g]])} layer {int(lay[starts[g]])} routes {int(counts[g])} "
                               f"experts, token {int(tok[0])} layer {int(lay[0])} routes {k} "
                               "(every token needs the same k in every layer)")
    return trace_from_records(path, tok[starts], lay[starts], exp.reshape(-1, k), None)


def trace_from_records(path: str, pos: np.ndarray, layer: np.ndarray, experts: np.ndarray,
                       gates: np.ndarray | None, *, layer_kind: str = "model",
                       n_experts: int | None = None) -> Trace:
    """One record per (token, layer): ``experts`` and ``gates`` are ``(records, k)``."""
    if not len(pos):
        raise TraceError(path, "empty trace: no routing records")
    order = np.lexsort((pos, layer))
    lay, tok, exp = layer[order], pos[order], experts[order].astype(np.int32)
    twice = np.flatnonzero((lay[1:] == lay[:-1]) & (tok[1:] == tok[:-1]))
    if len(twice):
        raise TraceError(path, f"token {int(tok[twice[0]])} layer {int(lay[twice[0]])} is recorded twice")
    dup = np.flatnonzero((np.diff(np.sort(exp, axis=1), axis=1) == 0).any(axis=1))
    if len(dup):
        r = int(dup[0])
        raise TraceError(path, f"token {int(tok[r])} layer {int(lay[r])} names an expert twice: {exp[r].tolist()}")
    cuts = np.flatnonzero(np.diff(lay)) + 1
    layers = tuple(int(x) for x in lay[np.r_[0, cuts]])
    gate = None if gates is None else np.split(gates[order].astype(np.float32), cuts)
    return Trace(layers=layers,
                 positions=tuple(frozen(p.copy()) for p in np.split(tok.astype(np.int64), cuts)),
                 experts=tuple(frozen(e.copy()) for e in np.split(exp, cuts)),
                 gates=None if gate is None else tuple(frozen(g.copy()) for g in gate),
                 n_experts=int(n_experts if n_experts is not None else exp.max() + 1),
                 source=path, layer_kind=layer_kind)
