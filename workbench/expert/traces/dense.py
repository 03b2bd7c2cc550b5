"""The dense form a decode session replays: ``(tokens, layers, k)`` expert ids for the model's MoE
layers, made from a :class:`Trace` by one rule for gaps (below)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.limits import check_ids
from workbench.expert.traces.trace import Trace, frozen


@dataclass(frozen=True, eq=False)
class RoutingTrace:
    """``experts[t, i]`` are the ``k`` expert ids token ``t`` uses in model layer ``layers[i]``."""

    experts: np.ndarray  # (tokens, len(layers), k), int32, read-only
    layers: tuple[int, ...]
    n_experts: int
    source: str  # "uniform seed=0", "zipf s=1.2 seed=0", or the file it came from
    gates: np.ndarray | None = None  # (tokens, len(layers), k) float32 gate weights where the file had them
    note: str = ""  # what the gap rule dropped, or how ordinal layers were mapped

    @property
    def tokens(self) -> int:
        return int(self.experts.shape[0])

    @property
    def k(self) -> int:
        return int(self.experts.shape[2])

    def token(self, t: int) -> np.ndarray:
        """Token ``t``'s routing, ``(layers, k)``; a trace shorter than the session replays from the start."""
        return self.experts[t % self.tokens]


def dense_routing(trace: Trace, *, layers: Sequence[int] | None = None,
                  n_experts: int | None = None) -> RoutingTrace:
    """``trace`` for a model with MoE ``layers`` and ``n_experts`` experts per layer (None: the trace's own).

    The gap rule: every MoE layer of the model must be in the trace (a missing layer is refused); a
    token position missing from any layer is dropped from all of them and the rest replayed in order
    (``note`` says how many); a ``[tokens, layers, k]`` array's layer ``i`` is the model's ``i``-th MoE layer.
    """
    path, note = trace.source, []
    ids = list(trace.layers)
    if trace.layer_kind == "ordinal" and layers is not None:
        model = sorted(int(x) for x in layers)
        if max(ids) >= len(model):
            raise TraceError(path, f"has MoE layers 0 .. {max(ids)} (counted from 0), the model has {len(model)}")
        ids = [model[i] for i in ids]
        if ids != list(range(len(ids))):
            note.append(f"layer i of the array is MoE layer i of the model ({ids[0]} .. {ids[-1]})")
    _check_layers(path, ids, layers)
    top = max(int(e.max()) for e in trace.experts)
    if n_experts is not None and top >= n_experts:
        raise TraceError(path, f"expert {top} out of range (the model has {n_experts} experts per layer)")
    common = trace.positions[0]
    for pos in trace.positions[1:]:
        common = np.intersect1d(common, pos, assume_unique=True)
    if not len(common):
        raise TraceError(path, "no token is recorded in every layer: nothing a session can replay")
    check_ids(path, "replayed", len(common) * len(ids) * trace.k)
    dropped = trace.tokens - len(common)
    if dropped:
        note.append(f"{dropped} of {trace.tokens} tokens dropped (not recorded in every layer)")
    rows = [np.searchsorted(pos, common) for pos in trace.positions]
    order = np.argsort(ids)
    experts = np.stack([trace.experts[i][rows[i]] for i in order], axis=1)
    gates = None if trace.gates is None else frozen(np.stack([trace.gates[i][rows[i]] for i in order], axis=1))
    return RoutingTrace(frozen(experts), tuple(sorted(ids)), n_experts or top + 1, path, gates, "; ".join(note))


def _check_layers(path: str, found: Sequence[int], model: Sequence[int] | None) -> None:
    if model is None or set(found) == set(model):
        return
    missing, extra = sorted(set(model) - set(found)), sorted(set(found) - set(model))
    detail = f"missing MoE layers {_brief(missing)}" if missing else ""
    detail += ("; " if detail else "") + (f"layers {_brief(extra)} are not MoE layers of the model" if extra else "")
    raise TraceError(path, f"trace does not match the model: {detail}")


def _brief(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:6])) + (f" … ({len(ids)} in all)" if len(ids) > 6 else "")
