"""``trace fit``: the :class:`~workbench.expert.traces.sticky.StickyModel` whose synthesized traces match
a trace's popularity (per expert, per layer), overlap with the previous token and working set, and how
closely the fitted trace's statistics follow the original's (:data:`TOLERANCES`).

The fit is a calibration by simulation, seeded, every candidate and layer simulated at once:

1. recency and memory: on up to :data:`_SELECT_LAYERS` layers, each candidate (no history, or memory
   4 … 256 tokens with recency 0.3 / 0.6 / 0.9, then the best one's neighbours) is calibrated as in 2
   and the one whose working-set curve lies closest to the trace's, over those layers, is kept for
   every layer;
2. popularity and stickiness, per layer: the weights start at the trace's expert shares and are
   corrected multiplicatively for what drawing ``k`` without replacement, keeping and the history do
   to them; the stickiness is bisected until the synthesized overlap meets the trace's. Every round draws
   afresh (its own seed); the weights are their mean over the bisection's rounds.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from workbench.expert.traces.dense import RoutingTrace
from workbench.expert.traces.limits import MAX_IDS
from workbench.expert.traces.sticky import StickyModel, as_trace, simulate
from workbench.expert.traces.stats import TraceStats, trace_stats
from workbench.expert.traces.trace import Trace

# How far a fitted trace may stand from its source (:func:`deviation`), for a source long enough to
# sample its own statistics: its two halves stand closer than this (``source_halves_gap`` says).
TOLERANCES = {"popularity": 0.05, "overlap": 0.03, "working_set": 0.06}
CANDIDATES = [(1.0, 0.0)] + [(float(m), r) for m in (4, 16, 64, 256) for r in (0.3, 0.6, 0.9)]  # (memory, recency)
_SELECT_LAYERS = 8
_WARMUP_ROUNDS, _BISECT_ROUNDS = 3, 8


@dataclass(frozen=True)
class FitResult:
    """The model, the statistics of the source and of a trace synthesized from the model, and how far
    apart they stand (``deviation``: a row per measure with its largest gap over layers and its tolerance)."""

    model: StickyModel
    original: TraceStats
    fitted: TraceStats
    deviation: pd.DataFrame

    @property
    def within(self) -> bool:
        return bool(self.deviation["within"].all())


def fit_trace(trace: Trace, *, seed: int = 0, tokens: int | None = None) -> FitResult:
    """Fit ``trace`` and compare it with ``tokens`` synthesized tokens (default: the longer of the
    trace and 10,000, so the comparison's noise is mostly the source's)."""
    original = trace_stats(trace)
    model = fit_model(trace, original, seed=seed)
    per_layer = max(len(p) for p in trace.positions)
    n_tokens = tokens or min(max(per_layer, 10_000), MAX_IDS // (len(trace.layers) * trace.k))
    fitted = trace_stats(as_trace(model.synthesize(n_tokens, seed=seed + 1)))
    own = tuple(trace_stats(h) for h in halves(trace)) if min(len(p) for p in trace.positions) >= 4 else None
    return FitResult(model, original, fitted, deviation(original, fitted, own))


def fit_model(trace: Trace, stats: TraceStats, *, seed: int = 0) -> StickyModel:
    """The model for ``trace`` (``stats`` its statistics)."""
    n, k, n_layers = trace.n_experts, trace.k, len(trace.layers)
    pop = stats.popularity.pivot(index="layer", columns="expert", values="lookups").loc[list(trace.layers)]
    counts = pop.to_numpy(dtype=float)
    eps = 0.5 / counts.sum(axis=1, keepdims=True)  # half a lookup: an expert the trace never routed stays possible
    target = _normalise(counts / counts.sum(axis=1, keepdims=True) + eps)
    overlap = stats.summary.set_index("layer").loc[list(trace.layers), "overlap"].to_numpy(dtype=float)
    longest = max(len(p) for p in trace.positions)
    # ~200 lookups an expert, but no longer than a few times the trace: its own shares are only that sure
    calib = int(min(np.clip(200 * n // k, 2000, 8000), max(2000, 4 * longest)))
    memory, recency = _select(trace, stats, target, eps, overlap, calib, longest, seed)
    mem, rec = np.full(n_layers, memory), np.full(n_layers, recency)
    weights, rho, _ = _calibrate(target, eps, overlap, mem, rec, k, calib, seed)
    return StickyModel(trace.layers, n, k, weights, rho, rec, mem, trace.layer_kind, trace.source,
                       gate_pool(trace, seed))


def gate_pool(trace: Trace, seed: int, samples: int = 256) -> np.ndarray | None:
    """Per layer, ``samples`` of the trace's gate-weight rows (sorted high to low), or None without gates."""
    if trace.gates is None:
        return None
    rng = np.random.default_rng([seed, 0x6A7E])
    rows = [-np.sort(-g, axis=1) for g in trace.gates]
    return np.stack([r[rng.choice(len(r), samples, replace=len(r) < samples)] for r in rows])


def _select(trace: Trace, stats: TraceStats, target: np.ndarray, eps: np.ndarray, overlap: np.ndarray,
            calib: int, longest: int, seed: int) -> tuple[float, float]:
    """(memory, recency) of the candidate whose working set lies closest to the trace's: the grid of
    :data:`CANDIDATES`, then the best one's neighbours (memory halved and doubled, recency nudged)."""
    cands = [c for c in CANDIDATES if c[0] <= max(longest / 2, 1)]
    picked = np.unique(np.linspace(0, len(trace.layers) - 1, min(_SELECT_LAYERS, len(trace.layers))).astype(int))
    if len(cands) == 1 or np.isnan(overlap[picked]).all():
        return cands[0]
    args = (trace, stats, target, eps, overlap, calib, seed, picked)
    errors = _errors(cands, *args)
    memory, recency = cands[int(np.argmin(errors))]
    if recency == 0:
        return memory, recency
    near = [(memory * f, recency) for f in (0.5, 0.7, 1.4, 2.0) if memory * f <= max(longest / 2, 1)]
    near += [(memory, r) for r in (recency - 0.1, min(recency + 0.05, 0.99)) if 0 < r < 1]
    near_errors = _errors(near, *args)
    if near_errors.min() < errors.min():
        return near[int(np.argmin(near_errors))]
    return memory, recency


def _errors(cands: list[tuple[float, float]], trace: Trace, stats: TraceStats, target: np.ndarray, eps: np.ndarray,
            overlap: np.ndarray, calib: int, seed: int, picked: np.ndarray) -> np.ndarray:
    """Per candidate: the largest gap of the working-set curve (mean over the picked layers) from the
    trace's, plus the mean gap of the overlap, on a fresh seed after calibration."""
    rows = [(c, i) for c in range(len(cands)) for i in picked]
    mem = np.array([cands[c][0] for c, _ in rows])
    rec = np.array([cands[c][1] for c, _ in rows])
    idx = np.array([i for _, i in rows])
    weights, rho, _ = _calibrate(target[idx], eps[idx], overlap[idx], mem, rec, trace.k, calib, seed)
    # judged on a fresh seed: a candidate whose overlap cannot come down to the trace's loses here
    sim = simulate(weights, rho, rec, mem, trace.k, calib, np.random.default_rng([seed, 1 << 20]))
    got = trace_stats(as_trace(RoutingTrace(sim, tuple(range(len(rows))), trace.n_experts, "calibration")))
    ws = got.working_set[got.working_set["layer"] != "all"].copy()
    row = ws["layer"].astype(int).to_numpy()
    ws["cand"] = [rows[r][0] for r in row]
    ws["layer"] = [trace.layers[idx[r]] for r in row]
    both = ws.merge(stats.working_set, on=["layer", "window"], suffixes=("", "_trace"))
    curve = (both["fraction"] - both["fraction_trace"]).groupby([both["cand"], both["window"]]).mean()
    error = curve.abs().groupby(level="cand").max().reindex(range(len(cands)), fill_value=0.0)
    miss = np.abs(got.summary["overlap"].to_numpy()[:len(rows)] - np.nan_to_num(overlap[idx]))
    return error.to_numpy() + pd.Series(miss).groupby([c for c, _ in rows]).mean().to_numpy()


def _calibrate(target: np.ndarray, eps: np.ndarray, overlap: np.ndarray, memory: np.ndarray, recency: np.ndarray,
               k: int, tokens: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the weights and stickiness that meet ``target`` shares and ``overlap``, and the last simulation."""
    has_pairs = np.isfinite(overlap)
    goal = np.nan_to_num(overlap)
    log_w, lo, hi = np.log(target), np.zeros(len(target)), np.ones(len(target))
    rho = np.where(has_pairs, 0.5, 0.0)
    kept = []
    for round_ in range(_WARMUP_ROUNDS + _BISECT_ROUNDS):
        sim = simulate(_normalise(np.exp(log_w)), rho, recency, memory, k, tokens, np.random.default_rng([seed, round_]))
        log_w = log_w + 0.8 * (np.log(target) - np.log(_shares(sim, target.shape[1]) + eps))
        log_w -= log_w.max(axis=1, keepdims=True)
        if round_ >= _WARMUP_ROUNDS:
            kept.append(log_w)
            low = _overlap(sim) < goal
            lo, hi = np.where(low, rho, lo), np.where(low, hi, rho)
            rho = np.where(has_pairs, (lo + hi) / 2, 0.0)
    # each round's weights carry its own sample's noise (a sticky layer samples few independent
    # tokens): their mean over the bisection's rounds is the estimate
    return _normalise(np.exp(np.mean(kept, axis=0))), rho, sim


def deviation(original: TraceStats, fitted: TraceStats, source_halves: tuple[TraceStats, TraceStats] | None = None
              ) -> pd.DataFrame:
    """A row per measure: the gap between the two traces (popularity: the largest total variation
    distance of a layer's expert shares; overlap: the largest difference of a layer's; working set: the
    largest difference of the all-layer curve over the windows both have), its tolerance, and — given
    the source's two halves — the same gap between them: how much the source itself moves."""
    gaps = _gaps(original, fitted)
    own = _gaps(*source_halves) if source_halves else {m: np.nan for m in gaps}
    rows = [{"measure": m, "largest_gap": float(g), "tolerance": TOLERANCES[m],
             "within": bool(np.isnan(g) or g <= TOLERANCES[m]), "source_halves_gap": float(own[m])}
            for m, g in gaps.items()]
    return pd.DataFrame(rows)


def _gaps(a: TraceStats, b: TraceStats) -> dict[str, float]:
    pa = a.popularity.pivot(index="layer", columns="expert", values="share")
    pb = b.popularity.pivot(index="layer", columns="expert", values="share").reindex_like(pa)
    sa, sb = (s.summary.set_index("layer") for s in (a, b))
    ws = pd.merge(a.working_set, b.working_set, on=["layer", "window"], suffixes=("_a", "_b"))
    ws = ws[ws["layer"] == "all"]
    return {"popularity": float((0.5 * (pa - pb).abs().sum(axis=1)).max()),
            "overlap": float((sa["overlap"] - sb["overlap"]).drop("all").abs().max()),
            "working_set": float((ws["fraction_a"] - ws["fraction_b"]).abs().max())}


def halves(trace: Trace) -> tuple[Trace, Trace]:
    """The trace's first and second half of each layer's recorded tokens."""
    cut = [len(p) // 2 for p in trace.positions]
    part = lambda arrs, first: tuple(a[:c] if first else a[c:] for a, c in zip(arrs, cut))  # noqa: E731
    return tuple(replace(trace, positions=part(trace.positions, f), experts=part(trace.experts, f),
                         gates=None if trace.gates is None else part(trace.gates, f)) for f in (True, False))


def _normalise(w: np.ndarray) -> np.ndarray:
    return w / w.sum(axis=1, keepdims=True)


def _shares(sim: np.ndarray, n: int) -> np.ndarray:
    tokens, n_rows, k = sim.shape
    flat = sim.transpose(1, 0, 2).reshape(n_rows, -1) + (np.arange(n_rows) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=n_rows * n).reshape(n_rows, n) / (tokens * k)


def _overlap(sim: np.ndarray) -> np.ndarray:
    """Per row, the fraction of a token's experts the previous token used."""
    same = (sim[1:, :, :, None] == sim[:-1, :, None, :]).any(axis=3)
    return same.mean(axis=(0, 2))
