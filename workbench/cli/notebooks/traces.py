"""Notebook 07's actions: a routing trace's statistics, per-layer cache policies against Belady's bound, and
the chosen configuration replayed as a decode session (issue 34, section 6).

The work is in plain functions, testable without a kernel: :func:`trace_inputs` (the model and the trace:
given, or a seeded sticky trace written for the model), :func:`simulate_trace` (``workbench trace
simulate``'s numbers and caveats), :func:`replay_session` (``workbench session --trace … --cache-experts N
--policy P``, recorded in the ledger) and :func:`replay_frame` (simulated beside measured hit rate: the
simulator predicts the replay exactly, so they agree within a point or something is wrong). The panel is
in :mod:`workbench.cli.notebooks.traces_panel`, the figures in :mod:`workbench.cli.notebooks.trace_figures`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from workbench.settings import defaults
from workbench.cli.notebooks.experts import moe_model
from workbench.errors import ParamError, TraceError, WorkbenchError

AGREE_POINTS = 1.0  # simulated and measured hit rate of one replay agree within this many points (issue 34 §2)
ALIGNMENT = 64  # the synthetic MoE GGUF's alignment: expert slices off page boundaries, as in real files


@dataclass(frozen=True)
class TraceInputs:
    """The model the replay runs on, the trace the statistics read, the trace the session replays (the
    same file unless only the model's layers of it are replayed), and what was made or mapped."""

    model: Path
    trace: Path
    replay: Path
    notes: tuple[str, ...] = ()


def sticky_model(layers: Sequence[int], n_experts: int, k: int, *, skew: float, stickiness: float,
                 seed: int) -> Any:
    """A :class:`~workbench.expert.traces.StickyModel` with Zipf(``skew``) popularity (each layer its own
    seeded order of experts), ``stickiness`` and a recent history of ~32 tokens (recency 0.3)."""
    from workbench.expert.traces import StickyModel

    if not 0.0 <= stickiness <= 1.0:
        raise ParamError("notebook 07", "stickiness", f"must be in [0, 1], got {stickiness!r}")
    if not 0.0 <= skew <= 8.0:
        raise ParamError("notebook 07", "skew", f"must be in [0, 8] (a Zipf exponent), got {skew!r}")
    if not 1 <= k <= n_experts:
        raise ParamError("notebook 07", "k", f"must be in [1, {n_experts}] (the model's experts per layer), got {k!r}")
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_experts + 1, dtype=np.float64) ** -skew
    weights = np.stack([rng.permutation(ranks) for _ in layers])
    rows = len(layers)
    return StickyModel(tuple(layers), n_experts, k, weights / weights.sum(axis=1, keepdims=True),
                       np.full(rows, stickiness), np.full(rows, 0.3), np.full(rows, 32.0),
                       fitted_to=f"notebook 07: zipf s={skew:g}, stickiness {stickiness:g}, seed {seed}")


def traces_dir() -> Path:
    """Where the notebook writes the traces it makes: ``<data root>/traces``."""
    return defaults.data_root() / "traces"


def synthetic_trace_file(model: Path, *, tokens: int, k: int, seed: int, skew: float, stickiness: float) -> Path:
    """A seeded sticky trace for ``model``'s MoE layers and experts, written (``.npy`` rows) under
    :func:`traces_dir`; the same arguments give the same file."""
    from workbench.expert.routing import moe_shape
    from workbench.expert.traces import trace_bytes
    from workbench.formats import open_index
    from workbench.output.files import write_bytes

    if not 1 <= tokens <= 1_000_000:
        raise ParamError("notebook 07", "synthetic_tokens", f"must be in [1, 1000000], got {tokens!r}")
    layers, n = moe_shape(open_index(model).blobs)
    routing = sticky_model(layers, n, k, skew=skew, stickiness=stickiness, seed=seed).synthesize(tokens, seed=seed)
    path = traces_dir() / f"sticky-{model.stem}-k{k}-t{tokens}-z{skew:g}-p{stickiness:g}-s{seed}.npy"
    return write_bytes(path, trace_bytes(routing, path), inputs=(str(model),), force=True, made=1)


def trace_inputs(trace: str, file: str, *, size: str, experts: int, k: int, tokens: int, seed: int, skew: float,
                 stickiness: float) -> TraceInputs:
    """The model and the trace. No ``trace``: the model (``file``, else a synthetic alignment-64 MoE GGUF of
    ``size`` and ``experts``) and a seeded sticky trace written for it. A ``trace`` and a ``file``: both as
    given (a session refuses a mismatch in one line). A ``trace`` alone: a synthetic model with the trace's
    experts per layer; when that model has fewer MoE layers than the trace, its first layers are replayed."""
    if not trace:
        model = moe_model(file, ALIGNMENT, size, experts)
        made = synthetic_trace_file(model, tokens=tokens, k=k, seed=seed, skew=skew, stickiness=stickiness)
        return TraceInputs(model, made, made, (f"trace: {tokens} tokens written by a seeded sticky generator "
                                               f"(zipf s={skew:g}, stickiness {stickiness:g}, seed {seed}) to {made}",))
    path = Path(trace)
    if not path.is_file():
        raise TraceError(trace, "no such trace file")
    if file:
        return TraceInputs(moe_model(file, ALIGNMENT, size, experts), path, path)
    from workbench.expert.traces import read_trace

    raw = read_trace(path)
    model = moe_model("", ALIGNMENT, size, raw.n_experts)
    return _fit_layers(raw, path, model, size)


def _fit_layers(raw: Any, path: Path, model: Path, size: str) -> TraceInputs:
    """The trace replayed on a synthetic model: as it is when the layers match, else its first layers."""
    from workbench.expert.routing import RoutingTrace, moe_shape
    from workbench.expert.traces import dense_routing, trace_bytes
    from workbench.formats import open_index
    from workbench.output.files import write_bytes

    layers, _n = moe_shape(open_index(model).blobs)
    ids = sorted(range(len(raw.layers))) if raw.layer_kind == "ordinal" else sorted(raw.layers)
    if len(ids) == len(layers) and (raw.layer_kind == "ordinal" or list(ids) == list(layers)):
        return TraceInputs(model, path, path)
    if len(ids) < len(layers):
        raise TraceError(str(path), f"has {len(ids)} MoE layers, the synthetic model of {size} has {len(layers)}: "
                                    "give a smaller size, or the trace's model as file")
    dense = dense_routing(raw)
    kept = RoutingTrace(np.ascontiguousarray(dense.experts[:, :len(layers)]), tuple(layers), raw.n_experts,
                        f"{path} (its first {len(layers)} layers)")
    out = traces_dir() / f"{path.stem}-first{len(layers)}layers-{model.stem}.npy"
    write_bytes(out, trace_bytes(kept, out), inputs=(str(path), str(model)), force=True, made=1)
    note = (f"the synthetic model ({size}) has {len(layers)} MoE layers: the session replays the trace's layers "
            f"{dense.layers[0]} .. {dense.layers[len(layers) - 1]} (written to {out}); the statistics and the "
            f"simulation cover all {len(ids)}")
    return TraceInputs(model, path, out, (note,) + ((f"replayed as a session would: {dense.note}",) if dense.note else ()))


def cache_sizes(sizes: Sequence[int], k: int, n_experts: int) -> list[int]:
    """The sizes asked, or (none) a ladder from k to the experts per layer: k, 2k, n/8, n/4, n/2, 3n/4."""
    if sizes:
        return [int(s) for s in sizes]
    ladder = {k, 2 * k, n_experts // 8, n_experts // 4, n_experts // 2, 3 * n_experts // 4}
    return sorted(s for s in ladder if k <= s <= n_experts)


def simulate_trace(trace: Path, policies: Sequence[str], sizes: Sequence[int], n_experts: int | None = None) -> Any:
    """``workbench trace simulate TRACE``: every policy at every size beside Belady's (a
    :class:`~workbench.expert.policies.simulate.Simulation`); ``n_experts``: the model's experts per layer."""
    from workbench.expert.policies.simulate import run_simulation
    from workbench.expert.traces import dense_routing, read_trace

    raw = read_trace(trace)
    raw = raw.with_experts(n_experts) if n_experts and n_experts != raw.n_experts else raw
    routing = dense_routing(raw, n_experts=raw.n_experts)
    return run_simulation(routing, list(policies), cache_sizes(sizes, routing.k, routing.n_experts))


REPLAY_CACHES = ("per-layer", "bytes")


def budget_mib(model: Path, cache_experts: int) -> float:
    """The bytes ``cache_experts`` experts a layer come to (each layer's largest slice per blob), in MiB."""
    from workbench.expert.policies.partition import unit_bytes
    from workbench.formats import open_index

    by_layer: dict[int, list[Any]] = {}
    for blob in open_index(model).blobs:
        by_layer.setdefault(blob.layer, []).append(blob)
    return sum(cache_experts * unit_bytes(blobs) for blobs in by_layer.values()) / 2**20


def replay_config(inputs: TraceInputs, *, turns: int, tokens: int, cache_experts: int, policy: str, prefetch: str,
                  overlap: bool, lanes: int, compute: str, seed: int, cache: str = "per-layer") -> Any:
    """The session that replays ``inputs.replay``: per-layer caches of ``cache_experts`` experts (what the
    simulator models), or (``cache="bytes"``) one byte budget of the same size over every layer, lru or fifo,
    which a predictor's prefetch needs (it stages experts the trace does not route there)."""
    from workbench.expert.session_config import SessionConfig

    if cache not in REPLAY_CACHES:
        raise ParamError("notebook 07", "replay_cache", f"{cache!r} is not one of {', '.join(REPLAY_CACHES)}")
    common = dict(turns=turns, tokens=tokens, trace=str(inputs.replay), policy=policy, prefetch=prefetch,
                  overlap=overlap, lanes=lanes, compute=compute, seed=seed)
    if cache == "bytes":
        return SessionConfig(cache_mib=budget_mib(inputs.model, cache_experts), **common)
    return SessionConfig(cache_experts=cache_experts, **common)


def predicted(model: Path, config: Any) -> Any:
    """What the simulator predicts for ``config``'s session: its policy at its N over the tokens it replays
    (a trace shorter than the session repeats from the start, as the session's cache does); Belady's beside.
    None for a byte budget (the simulator models per-layer caches)."""
    from workbench.expert.policies.simulate import run_simulation
    from workbench.expert.routing import RoutingTrace
    from workbench.expert.session_config import routing
    from workbench.formats import open_index

    if config.cache_experts is None:
        return None
    trace, _note = routing(open_index(model), config)
    need = config.turns * config.tokens
    replayed = RoutingTrace(trace.experts[np.arange(need) % trace.tokens], trace.layers, trace.n_experts, trace.source)
    return run_simulation(replayed, [config.policy], [config.cache_experts])


def replay_session(model: Path, config: Any, *, device: str, store: Path, campaign: str, hypothesis: str,
                   say: Callable[[str], None] = lambda _m: None) -> tuple[Any, list[str]]:
    """The session, measured in its worker process and recorded in the ledger; its result and the warnings
    it started with (as ``workbench session`` prints them). A failed session is one WorkbenchError line."""
    from workbench.measure.session.runner import measure_session

    warnings: list[str] = []

    def on_turn(record: Any) -> None:
        say(f"replay: turn {record.turn + 1}/{config.turns}, hit rate {record.hit_rate:.0%}")
    result = measure_session(str(model), config, device=device, ledger=store, campaign=campaign,
                             hypothesis=hypothesis, on_turn=on_turn,
                             on_start=lambda facts: warnings.extend(facts.warnings))
    if result.error:
        raise WorkbenchError(f"replay session {result.attempt_id[:8]}: {result.error}")
    return result, warnings


def measured_hit_rate(result: Any) -> tuple[float, int]:
    """The session's hits over its lookups (every slice of an expert counted, as its turns record them)."""
    hits = sum(t.hits for t in result.report.turns)
    lookups = hits + sum(t.misses for t in result.report.turns)
    return (hits / lookups if lookups else float("nan")), lookups


NOT_SIMULATED = "not simulated: one byte budget over every layer (the simulator models per-layer caches)"


def replay_frame(sim: Any, result: Any, config: Any) -> Any:
    """One row: the policy and its cache, the simulated hit rate (and Belady's), the session's, their gap in
    points, and the prefetch: the predictor's precision and recall, the read stall per token."""
    import pandas as pd

    rate, lookups = measured_hit_rate(result)
    s = result.report.summary
    row: dict[str, Any] = {"session": result.attempt_id[:8], "policy": config.policy,
                           "cache": (f"{config.cache_experts} experts/layer" if config.cache_experts is not None else
                                     f"{config.cache_mib:.2f} MiB"),
                           "prefetch": config.prefetch, "tokens replayed": config.turns * config.tokens}
    if sim is None:
        row.update({"simulated hit rate": None, "Belady's at N": None, "measured hit rate": round(rate, 4),
                    "measured − simulated (points)": None, "check": NOT_SIMULATED})
    else:
        doc = sim.to_json()
        bound = next(r for r in doc["results"] if r["policy"] == "belady")
        mine = next((r for r in doc["results"] if r["policy"] != "belady"), bound)
        gap = (rate - mine["hit_rate"]) * 100
        row.update({"simulated hit rate": round(mine["hit_rate"], 4), "Belady's at N": round(bound["hit_rate"], 4),
                    "measured hit rate": round(rate, 4), "measured − simulated (points)": round(gap, 2),
                    "check": (f"agree within {AGREE_POINTS:g} point" if abs(gap) <= AGREE_POINTS else
                              f"DIFFER by {abs(gap):.1f} points: the session did not replay what the simulator read")})
    precision, recall = (getattr(s, f"prefetch_{x}", None) for x in ("precision", "recall"))  # None: no predictor
    row.update({"session lookups (slices)": lookups, "prefetch precision": _round(precision),
                "prefetch recall": _round(recall),
                "read stall ms/token": round(s.stall_read_s / s.tokens * 1e3, 3)})
    return pd.DataFrame([row])


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
