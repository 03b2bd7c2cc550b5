"""A seeded routing generator with per-layer popularity, sticky experts and a recent history, the model
``trace fit`` fits.

Per layer ``l``: each token keeps every expert of the previous token independently with probability
``stickiness[l]`` and draws the rest without replacement (Gumbel top-k) among the others, with weights
``(1 - recency[l]) * weights[l] + recency[l] * history`` — ``history`` the layer's recent use of each
expert, an exponential average over ``memory`` tokens (the first token: ``weights[l]``). Popularity sets
which experts are hot overall; stickiness how often a token reuses its predecessor's experts; recency and
memory how long a set of experts stays hot (the phases of a text), and with them the reuse distances and
the working set. With ``recency = 0`` it is popularity plus stickiness alone. Gate weights, where the
trace had them, are drawn from the trace's own (sorted high to low), independently of which experts
were routed. What it does not model: correlation between layers, or between an expert and its gate —
``trace fit`` shows where the fitted trace's statistics part from the original's.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.dense import RoutingTrace
from workbench.expert.traces.limits import MAX_EXPERTS, MAX_K, MAX_LAYER, check_ids
from workbench.expert.traces.trace import Trace, frozen

MODEL_FORMAT = "workbench-routing-model"
_CHUNK_CELLS = 1 << 22  # random numbers drawn per chunk of tokens
_MAX_FILE_BYTES = 64 << 20


@dataclass(frozen=True, eq=False)
class StickyModel:
    """Fitted (or chosen) parameters: ``weights`` ``(layers, n_experts)`` (each row sums to 1),
    ``stickiness`` and ``recency`` ``(layers,)`` in [0, 1], ``memory`` ``(layers,)`` in tokens (>= 1);
    ``gates`` (or None) ``(layers, samples, k)``: a layer's gate weights as the trace gave them, sorted
    high to low, one row of which each synthesized token draws at random (its first expert the highest);
    ``fitted_to`` names the trace they were fitted to."""

    layers: tuple[int, ...]
    n_experts: int
    k: int
    weights: np.ndarray
    stickiness: np.ndarray
    recency: np.ndarray
    memory: np.ndarray
    layer_kind: str = "model"
    fitted_to: str = ""
    gates: np.ndarray | None = None

    def to_json(self) -> dict:
        gates = {} if self.gates is None else {"gates": np.round(self.gates, 5).tolist()}
        return {**gates, "format": MODEL_FORMAT, "version": 1, "kind": "sticky", "layers": list(self.layers),
                "layer_kind": self.layer_kind, "n_experts": self.n_experts, "k": self.k,
                "stickiness": [round(float(x), 6) for x in self.stickiness],
                "recency": [round(float(x), 6) for x in self.recency], "memory": [round(float(x), 3) for x in self.memory],
                "weights": [[float(f"{w:.6g}") for w in row] for row in self.weights], "fitted_to": self.fitted_to}

    def synthesize(self, tokens: int, *, seed: int = 0) -> RoutingTrace:
        """``tokens`` tokens of routing, seeded: same model and seed, same trace."""
        check_ids("synthetic trace", f"{tokens} tokens", tokens * len(self.layers) * self.k)
        experts = simulate(self.weights, self.stickiness, self.recency, self.memory, self.k, tokens,
                           np.random.default_rng(seed))
        gates = None if self.gates is None else draw_gates(self.gates, tokens, seed)
        return RoutingTrace(frozen(experts), self.layers, self.n_experts, f"sticky seed={seed} ({self.fitted_to})",
                            gates)


def draw_gates(pool: np.ndarray, tokens: int, seed: int) -> np.ndarray:
    """``(tokens, layers, k)`` gate weights, each (token, layer) one of its layer's rows of ``pool``
    (a stream of its own: the experts are the same with gates or without)."""
    pick = np.random.default_rng([seed, 0x6A7E]).integers(pool.shape[1], size=(tokens, pool.shape[0]))
    return frozen(pool[np.arange(pool.shape[0])[None, :], pick].astype(np.float32))


def simulate(weights: np.ndarray, stickiness: np.ndarray, recency: np.ndarray, memory: np.ndarray, k: int,
             tokens: int, rng: np.random.Generator) -> np.ndarray:
    """``(tokens, rows, k)`` int32 expert ids drawn by the model, every row (a layer, or a candidate
    parameter set while fitting) at once; the parameters are per row."""
    n_rows, n = weights.shape
    out = np.empty((tokens, n_rows, k), dtype=np.int32)
    rows = np.repeat(np.arange(n_rows)[:, None], k, axis=1)
    keep_by = np.exp(-1.0 / np.maximum(memory, 1e-9))[:, None]  # the history's decay per token
    base, mix = (1 - recency)[:, None] * weights, recency[:, None]
    history = weights.copy()
    step = max(1, _CHUNK_CELLS // (n_rows * n))
    prev = None
    for t0 in range(0, tokens, step):
        m = min(step, tokens - t0)
        noise = rng.gumbel(size=(m, n_rows, n))
        keep = rng.random((m, n_rows, k)) < stickiness[:, None]
        for j in range(m):
            score = np.log(base + mix * history + 1e-30) + noise[j]
            if prev is not None:
                score[rows[keep[j]], prev[keep[j]]] = np.inf  # kept experts come first; the rest by weight
            prev = np.argpartition(-score, k - 1, axis=1)[:, :k]
            out[t0 + j] = prev
            history *= keep_by
            history[rows, prev] += (1 - keep_by) / k
    return out


def as_trace(routing: RoutingTrace) -> Trace:
    """A dense routing trace as a :class:`Trace` (every layer covering tokens 0 .. tokens - 1)."""
    pos = frozen(np.arange(routing.tokens, dtype=np.int64))
    column = lambda a: tuple(frozen(np.ascontiguousarray(a[:, i])) for i in range(len(routing.layers)))  # noqa: E731
    return Trace(routing.layers, tuple(pos for _ in routing.layers), column(routing.experts),
                 None if routing.gates is None else column(routing.gates), routing.n_experts, routing.source)


def save_model(model: StickyModel, path: str | os.PathLike, *, inputs: tuple[str, ...] = ()) -> None:
    """Write the parameter file (JSON) through a temporary name, never over one of ``inputs``."""
    from workbench.output.files import write_text

    write_text(path, json.dumps(model.to_json()), inputs=inputs, force=True)


def is_model_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a parameter file (``.json``) rather than a trace."""
    return os.fspath(path).lower().endswith(".json")


def load_model(path: str | os.PathLike) -> StickyModel:
    """The parameter file ``path``; :class:`TraceError` (one line) when it is not a valid one."""
    path = os.fspath(path)
    try:
        if os.path.getsize(path) > _MAX_FILE_BYTES:
            raise TraceError(path, f"larger than {_MAX_FILE_BYTES >> 20} MiB: not a routing-model file")
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError) as exc:
        raise TraceError(path, f"not a readable routing-model file: {getattr(exc, 'strerror', None) or type(exc).__name__}") from None
    return _model_from(path, doc)


def _model_from(path: str, doc: object) -> StickyModel:
    if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT or doc.get("kind") != "sticky":
        raise TraceError(path, f"not a routing-model file (written by `workbench trace fit`: format {MODEL_FORMAT!r})")
    try:
        layers = tuple(_int(x, MAX_LAYER) for x in doc["layers"])
        n, k = _int(doc["n_experts"], MAX_EXPERTS + 1), _int(doc["k"], MAX_K + 1)
        weights = np.asarray(doc["weights"], dtype=np.float64)
        sticky = np.asarray(doc["stickiness"], dtype=np.float64)
        recency = np.asarray(doc.get("recency", [0.0] * len(layers)), dtype=np.float64)
        memory = np.asarray(doc.get("memory", [1.0] * len(layers)), dtype=np.float64)
        kind = doc.get("layer_kind", "model")
        gates = None if doc.get("gates") is None else np.asarray(doc["gates"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(path, f"routing-model file: bad or missing field ({type(exc).__name__}: {str(exc)[:80]})") from None
    ok = (len(layers) == len(set(layers)) >= 1 and 1 <= k <= n and weights.shape == (len(layers), n)
          and sticky.shape == recency.shape == memory.shape == (len(layers),) and kind in ("model", "ordinal")
          and bool(((1.0 <= memory) & (memory <= 1e9)).all()))
    unit = lambda a: bool(((0 <= a) & (a <= 1)).all())  # noqa: E731  (NaN fails too)
    if not ok or not (np.isfinite(weights).all() and (weights > 0).all() and unit(sticky) and unit(recency)):
        raise TraceError(path, "routing-model file: layers, n_experts, k, weights (layers x n_experts, > 0), "
                               "stickiness and recency (one a layer, in [0, 1]) and memory (>= 1 token) do not agree")
    if gates is not None and not (gates.ndim == 3 and gates.shape[0] == len(layers) and gates.shape[2] == k
                                  and 1 <= gates.shape[1] <= 4096 and (np.abs(gates) < 1e30).all()):
        raise TraceError(path, "routing-model file: gates must be layers x samples (1 .. 4096) x k finite numbers")
    return StickyModel(layers, n, k, weights / weights.sum(axis=1, keepdims=True), sticky, recency, memory, kind,
                       str(doc.get("fitted_to", ""))[:500], gates)


def _int(value: object, limit: int) -> int:
    if type(value) is not int or not 0 <= value < limit:
        raise ValueError(f"{str(value)[:20]} is not an integer in 0 .. {limit - 1}")
    return value
