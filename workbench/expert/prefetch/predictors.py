"""Predictors: given what is known before a layer runs, name the experts to stage for it.

Known before layer ``i`` of token ``t`` runs: the routing of every earlier token and of this token's
earlier layers — what :meth:`Predictor.observe` has been told, in decode order. Only the oracle reads
the trace ahead (it is the routing, degraded on purpose), and ``popularity from=trace`` profiles the
whole trace's counts ahead (an offline profile), never its order.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from workbench.errors import ParamError
from workbench.expert.prefetch.spec import PrefetchSpec
from workbench.expert.routing import RoutingTrace


class Predictor(Protocol):
    """Names experts (ids within the layer) to stage for layer position ``i`` of token ``t``."""

    description: str

    def predict(self, t: int, i: int) -> Sequence[int]: ...

    def observe(self, t: int, i: int, experts: Sequence[int]) -> None: ...


class NoPredictor:
    description = "none (nothing staged ahead: a layer's misses are read once it is routed)"

    def predict(self, t: int, i: int) -> Sequence[int]:
        return ()

    def observe(self, t: int, i: int, experts: Sequence[int]) -> None:
        return None


class PreviousToken:
    """The experts the previous token routed to in this layer (nothing before the first token)."""

    description = "previous (the previous token's experts for this layer)"

    def __init__(self) -> None:
        self._last: dict[int, tuple[int, ...]] = {}

    def predict(self, t: int, i: int) -> Sequence[int]:
        return self._last.get(i, ())

    def observe(self, t: int, i: int, experts: Sequence[int]) -> None:
        self._last[i] = tuple(int(e) for e in experts)


class Popularity:
    """The ``n`` experts of this layer routed most often — so far (``seen``), or over the whole trace
    counted ahead (``trace``); ties go to the lower id, experts never routed are never named."""

    def __init__(self, trace: RoutingTrace, n: int, source: str):
        self.n, self.source = n, source
        self.counts = np.zeros((len(trace.layers), trace.n_experts), dtype=np.int64)
        if source == "trace":
            for i in range(len(trace.layers)):
                self.counts[i] = np.bincount(trace.experts[:, i, :].ravel(), minlength=trace.n_experts)
        self.description = (f"popularity n={n} from={source} (the {n} most routed experts of the layer, "
                            + ("counted over the whole trace ahead)" if source == "trace" else "routed so far)"))

    def predict(self, t: int, i: int) -> Sequence[int]:
        row = self.counts[i]
        order = np.argsort(-row, kind="stable")[:self.n]  # most routed first, then the lower id
        return [int(e) for e in order if row[e] > 0]

    def observe(self, t: int, i: int, experts: Sequence[int]) -> None:
        if self.source == "seen":
            self.counts[i, list(experts)] += 1


class DegradedOracle:
    """The routing itself, degraded: each routed expert named with probability ``recall``, each other
    with ``q = recall·k·(1 − precision) / (precision·(n − k))``, so the expected precision is ``precision``."""

    def __init__(self, trace: RoutingTrace, precision: float, recall: float, seed: int):
        self.trace, self.recall = trace, recall
        self.q = other_rate(precision, recall, trace.k, trace.n_experts)
        self._rng = np.random.default_rng(seed)
        self.description = (f"oracle precision={precision:g} recall={recall:g} seed={seed} (each routed expert "
                            f"named with probability {recall:g}, each other with {self.q:.4g})")

    def predict(self, t: int, i: int) -> Sequence[int]:
        routed = np.zeros(self.trace.n_experts, dtype=bool)
        routed[self.trace.token(t)[i]] = True
        draw = self._rng.random(self.trace.n_experts)
        named = np.where(routed, draw < self.recall, draw < self.q)
        return [int(e) for e in np.flatnonzero(named)]

    def observe(self, t: int, i: int, experts: Sequence[int]) -> None:
        return None


def other_rate(precision: float, recall: float, k: int, n: int) -> float:
    """The probability the degraded oracle names an expert that was not routed (k of n were), so that
    its expected precision is ``precision``; one line when the model has too few other experts."""
    wrong = recall * k * (1 - precision) / precision
    if wrong > n - k:
        raise ParamError("session", "prefetch", f"oracle precision={precision:g} at recall={recall:g} needs "
                         f"{wrong:.2f} wrong experts a layer, but {n - k} of {n} are not routed (k = {k})")
    return wrong / (n - k) if n > k else 0.0


def check_fits(spec: PrefetchSpec, k: int, n: int) -> None:
    """One line, before a session starts, for a predictor this model cannot have (k routed of n)."""
    if spec.name == "oracle":
        other_rate(float(spec.get("precision", 1.0)), float(spec.get("recall", 1.0)), k, n)


def make_predictor(spec: PrefetchSpec, trace: RoutingTrace, seed: int) -> Predictor:
    """The predictor ``spec`` names over ``trace`` (``seed``: the session's, unless the spec gives one)."""
    if spec.name == "none":
        return NoPredictor()
    if spec.name == "previous":
        return PreviousToken()
    if spec.name == "popularity":
        return Popularity(trace, int(spec.get("n", trace.k)), str(spec.get("from", "seen")))
    if spec.name == "oracle":
        return DegradedOracle(trace, float(spec.get("precision", 1.0)), float(spec.get("recall", 1.0)),
                              int(spec.get("seed", seed)))
    raise ParamError("session", "prefetch", f"{spec.name!r} names no predictor (route stages the routing itself)")
