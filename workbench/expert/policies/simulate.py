"""Hit rates of per-layer expert caches over a routing trace, each policy beside Belady's bound.

:func:`simulate` runs the vectorized kernels (:mod:`.kernels`, :mod:`.arc_kernel`): every cache size of
a policy in one pass, a row per (size, layer). :func:`simulate_reference` runs :mod:`.layer`'s plain
classes one layer at a time, the way a session's cache runs them — slow, and the check on the kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from workbench.errors import ParamError
from workbench.expert.policies.arc_kernel import run_arc
from workbench.expert.policies.kernels import run_scored, run_static
from workbench.expert.policies.layer import make_layer_policy
from workbench.expert.policies.names import PolicySpec, parse_policy
from workbench.expert.routing import RoutingTrace


@dataclass(frozen=True)
class SimResult:
    """One policy at one cache size: hits per layer out of ``lookups_per_layer`` each."""

    policy: str
    cache_experts: int
    layers: tuple[int, ...]
    hits: tuple[int, ...]
    lookups_per_layer: int

    @property
    def lookups(self) -> int:
        return self.lookups_per_layer * len(self.layers)

    @property
    def hit_rate(self) -> float:
        return sum(self.hits) / max(1, self.lookups)

    @property
    def layer_rates(self) -> tuple[float, ...]:
        return tuple(h / max(1, self.lookups_per_layer) for h in self.hits)


def check_sizes(sizes: Sequence[int], trace: RoutingTrace, where: str = "simulate") -> list[int]:
    """The cache sizes, each at least the trace's k (a token's experts must fit) and at most its experts."""
    out = sorted(dict.fromkeys(int(n) for n in sizes))
    if not out:
        raise ParamError(where, "cache_experts", "name at least one cache size (experts per layer)")
    bad = [n for n in out if not trace.k <= n <= trace.n_experts]
    if bad:
        raise ParamError(where, "cache_experts", f"{bad[0]} experts per layer: must be in [{trace.k}, "
                         f"{trace.n_experts}] (a token routes {trace.k} of {trace.n_experts} experts per layer)")
    return out


def simulate(trace: RoutingTrace, policies: Sequence[str | PolicySpec], sizes: Sequence[int]) -> list[SimResult]:
    """Every policy at every size (``belady`` always among them: the bound), in the order asked, Belady first."""
    sizes = check_sizes(sizes, trace)
    specs = [p if isinstance(p, PolicySpec) else parse_policy(p, "simulate") for p in policies]
    specs = [PolicySpec("belady")] + [s for s in dict.fromkeys(specs) if s.name != "belady"]
    experts = np.ascontiguousarray(trace.experts)
    layers = len(trace.layers)
    caps = np.repeat(np.asarray(sizes, dtype=np.int64), layers)
    out = []
    for spec in specs:
        if spec.name == "static":
            hits = run_static(experts, sizes, trace.n_experts)
        elif spec.name == "arc":
            hits = run_arc(experts, caps, trace.n_experts)
        else:
            hits = run_scored(experts, caps, trace.n_experts, spec.name, spec.age_tokens)
        for i, n in enumerate(sizes):
            row = hits[i * layers:(i + 1) * layers]
            out.append(SimResult(str(spec), n, trace.layers, tuple(int(h) for h in row), trace.tokens * trace.k))
    return out


def simulate_reference(trace: RoutingTrace, policy: str | PolicySpec, size: int) -> SimResult:
    """One policy at one size through :mod:`.layer`'s classes (pinned: the token's own experts)."""
    spec = policy if isinstance(policy, PolicySpec) else parse_policy(policy, "simulate")
    check_sizes([size], trace)
    hits = []
    for i in range(len(trace.layers)):
        seq = np.asarray(trace.experts[:, i, :])
        layer = make_layer_policy(spec, size, seq, trace.n_experts)
        n = 0
        for t, row in enumerate(seq.tolist()):
            layer.start_token(t)
            token = set(row)
            for e in row:
                n += e in layer
                layer.access(e, token)
        hits.append(n)
    return SimResult(str(spec), size, trace.layers, tuple(hits), trace.tokens * trace.k)


def belady_fraction(results: Sequence[SimResult]) -> dict[tuple[str, int], float]:
    """Each result's hit rate over Belady's at its size (nan where Belady hits nothing)."""
    bound = {r.cache_experts: r.hit_rate for r in results if r.policy == "belady"}
    return {(r.policy, r.cache_experts): _ratio(r.hit_rate, bound[r.cache_experts]) for r in results}


def _ratio(rate: float, bound: float) -> float:
    return rate / bound if bound else float("nan")


STATIC_CAVEAT = ("static serves its cold experts without keeping them: Belady's MIN (every miss kept) does not bound "
                 "it, so its fraction can pass 1.00")


@dataclass(frozen=True)
class Simulation:
    """A sweep over one trace: every result, and what the trace was (``--json`` of ``trace simulate``)."""

    source: str
    note: str  # what the gap rule dropped, when the trace came from a file with gaps
    layers: tuple[int, ...]
    tokens: int
    k: int
    n_experts: int
    results: tuple[SimResult, ...]
    seconds: float  # the simulation's wall time, every policy and size

    @property
    def lookups(self) -> int:
        return sum(r.lookups for r in self.results)

    def caveats(self) -> list[str]:
        """What the hit rates do not say, one line each, as every surface shows them (CLI, notebook)."""
        said = [f"replayed as a session would: {self.note}"] if self.note else []
        if any(r.policy == "static" for r in self.results):
            said.append(STATIC_CAVEAT)
        return said

    def to_json(self) -> dict:
        frac = belady_fraction(self.results)
        bound = {r.cache_experts: r for r in self.results if r.policy == "belady"}
        rows = []
        for r in self.results:
            b = bound[r.cache_experts]
            rows.append({"policy": r.policy, "cache_experts": r.cache_experts, "hit_rate": r.hit_rate,
                         "of_belady": _finite(frac[(r.policy, r.cache_experts)]), "hits": sum(r.hits),
                         "lookups": r.lookups,
                         "layers": [{"layer": layer, "hit_rate": rate, "of_belady": _finite(_ratio(rate, br))}
                                    for layer, rate, br in zip(r.layers, r.layer_rates, b.layer_rates)]})
        return {"source": self.source, "note": self.note, "layers": list(self.layers), "tokens": self.tokens,
                "k": self.k, "n_experts": self.n_experts, "seconds": self.seconds,
                "lookups_per_s": self.lookups / self.seconds if self.seconds > 0 else None, "results": rows}


def _finite(x: float) -> float | None:
    return None if x != x else x


def run_simulation(trace: RoutingTrace, policies: Sequence[str | PolicySpec], sizes: Sequence[int]) -> Simulation:
    """:func:`simulate`, timed, with the trace's facts."""
    import time

    t0 = time.perf_counter()
    results = simulate(trace, policies, sizes)
    seconds = time.perf_counter() - t0
    return Simulation(trace.source, getattr(trace, "note", ""), trace.layers, trace.tokens, trace.k, trace.n_experts,
                      tuple(results), seconds)
