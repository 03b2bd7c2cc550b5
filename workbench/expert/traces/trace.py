"""A routing trace as read from a file: per layer, the token positions it covers and their experts."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.limits import MAX_EXPERTS


@dataclass(frozen=True, eq=False)
class Trace:
    """Which ``k`` experts each recorded token used in each recorded layer, and the gate weights if known.

    Layer ``layers[i]`` covers the token positions ``positions[i]`` (int64, strictly increasing) and
    routed token ``positions[i][j]`` to the ``k`` distinct experts ``experts[i][j]`` (int32) with gate
    weights ``gates[i][j]`` (float32; ``gates`` is None when the file has none). Layers are independent:
    each may cover other tokens, and a position missing from a layer is a gap there. Every array is
    read-only. ``layer_kind`` is ``"model"`` when the numbers are the model's layer numbers (CSV, JSONL,
    ``(N, 3)`` rows) and ``"ordinal"`` when they count the MoE layers from 0 (a ``[tokens, layers, k]``
    array, whose column ``i`` is the model's ``i``-th MoE layer).
    """

    layers: tuple[int, ...]
    positions: tuple[np.ndarray, ...]
    experts: tuple[np.ndarray, ...]
    gates: tuple[np.ndarray, ...] | None
    n_experts: int  # experts per layer: the file's largest id + 1, or the model's count
    source: str  # the file it came from, or how it was synthesized
    layer_kind: str = "model"  # "model" | "ordinal"

    @property
    def k(self) -> int:
        return int(self.experts[0].shape[1])

    @property
    def tokens(self) -> int:
        """Distinct token positions recorded in any layer."""
        return int(len(np.unique(np.concatenate(self.positions))))

    @property
    def lookups(self) -> int:
        """Expert lookups in the trace: recorded (token, layer) pairs times ``k``."""
        return sum(int(e.size) for e in self.experts)

    @property
    def complete(self) -> bool:
        """Every layer covers the same positions, with no gap."""
        first = self.positions[0]
        return (all(np.array_equal(p, first) for p in self.positions)
                and bool(len(first) == 0 or first[-1] - first[0] == len(first) - 1))

    def with_experts(self, n_experts: int) -> "Trace":
        """The trace for a model of ``n_experts`` experts per layer (a file names only the experts it
        routed: an expert never routed is still one of the model's)."""
        top = max(int(e.max()) for e in self.experts)
        if not top < n_experts <= MAX_EXPERTS:
            raise TraceError(self.source, f"routes expert {top}: the model's experts per layer must be "
                                          f"{top + 1} .. {MAX_EXPERTS}, not {n_experts}")
        return replace(self, n_experts=int(n_experts))

    def runs(self, i: int) -> np.ndarray:
        """Start indices (into ``positions[i]``) of layer ``i``'s runs of consecutive positions, and its end."""
        pos = self.positions[i]
        breaks = np.flatnonzero(np.diff(pos) != 1) + 1
        return np.concatenate([[0], breaks, [len(pos)]]).astype(np.int64)


def frozen(arr: np.ndarray) -> np.ndarray:
    """``arr`` made read-only (a trace's arrays never change under a session)."""
    arr.setflags(write=False)
    return arr
