"""What a trace is like, per layer, as pandas frames (for the CLI, ``--json`` and the notebooks' figures).

- **popularity**: each expert's share of the layer's lookups; its skew as ``top_share`` (the most
  popular expert's share × the experts per layer: 1 is uniform), ``gini`` (0 uniform, → 1 one expert),
  ``entropy`` (normalised: 1 uniform), ``half_set`` (the fewest experts carrying half the lookups, as a
  fraction of the experts: 0.5 uniform) and ``used`` (the fraction of experts routed at all).
- **overlap**: the fraction of a token's ``k`` experts the previous token also used (uniform routing:
  ``k / n_experts``, given as ``overlap_uniform``).
- **reuse distance**: for every lookup, the tokens since the layer last used that expert (1: the
  previous token); ``first`` counts lookups with none before them in their run.
- **working set**: the mean number of distinct experts in a window of ``N`` consecutive tokens, as a
  fraction of the experts, for ``N`` = 1, 2, 4, … (exact: every window of every run).
- **gate mass**: the top expert's gate weight (``gate_top``, as the file gave it) and its share of the
  ``k`` routed weights (``gate_top_share``), where the trace has gates.

Gaps: every statistic looks at one layer's recorded tokens; the temporal ones only inside runs of
consecutive positions (:meth:`Trace.runs`), so a gap is never read as a token without reuse.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.expert.traces.trace import Trace

SUMMARY_COLUMNS = ("layer", "tokens", "runs", "top_share", "gini", "entropy", "half_set", "used", "overlap",
                   "overlap_uniform", "reuse_median", "gate_top", "gate_top_share")
REUSE_BINS = ("1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", ">256", "first")


@dataclass(frozen=True)
class TraceStats:
    """A trace's statistics: ``summary`` (a row per layer, then ``"all"``), ``popularity`` (layer, expert,
    lookups, share, rank), ``reuse`` (layer, distance bin, lookups, fraction) and ``working_set`` (layer,
    window, distinct, fraction); layer ``"all"`` pools the layers (popularity skew: their mean)."""

    summary: pd.DataFrame
    popularity: pd.DataFrame
    reuse: pd.DataFrame
    working_set: pd.DataFrame
    n_experts: int
    k: int
    source: str

    def frames(self) -> dict[str, pd.DataFrame]:
        return {"summary": self.summary, "popularity": self.popularity, "reuse": self.reuse,
                "working_set": self.working_set}

    def to_json(self) -> dict:
        out: dict = {"source": self.source, "n_experts": self.n_experts, "k": self.k}
        for name, frame in self.frames().items():
            out[name] = frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
        return out


def trace_stats(trace: Trace) -> TraceStats:
    """Every statistic of ``trace`` (vectorized with numpy, one pass a layer)."""
    n, k = trace.n_experts, trace.k
    rows, pops, reuses, sets = [], [], [], []
    for i, layer in enumerate(trace.layers):
        gates = None if trace.gates is None else trace.gates[i]
        row, pop, reuse, ws = _layer(trace.experts[i], trace.runs(i), gates, n)
        rows.append({"layer": layer, **row})
        pops.append(pop.assign(layer=layer))
        reuses.append(reuse.assign(layer=layer))
        sets.append(ws.assign(layer=layer))
    popularity, reuse, working = (pd.concat(f, ignore_index=True) for f in (pops, reuses, sets))
    summary = pd.DataFrame(rows)
    summary = pd.concat([summary, pd.DataFrame([{**_pooled(summary, reuse, k, n), "tokens": trace.tokens}])],
                        ignore_index=True)
    reuse = pd.concat([reuse, _pooled_reuse(reuse)], ignore_index=True)
    working = pd.concat([working, working.groupby("window", as_index=False)[["distinct", "fraction"]].mean()
                         .assign(layer="all")], ignore_index=True)
    order = lambda f, first: f[[first, *[c for c in f.columns if c != first]]]  # noqa: E731
    return TraceStats(summary[list(SUMMARY_COLUMNS)].astype({"layer": object}), order(popularity, "layer"),
                      order(reuse, "layer"), order(working, "layer"), n, k, trace.source)


def _layer(experts: np.ndarray, runs: np.ndarray, gates: np.ndarray | None, n: int):
    tokens, k = experts.shape
    counts = np.bincount(experts.ravel(), minlength=n)
    share = counts / counts.sum()
    srt = np.sort(share)[::-1]
    row = {"tokens": tokens, "runs": len(runs) - 1, "top_share": float(srt[0] * n), "gini": _gini(counts),
           "entropy": float(-(share[share > 0] * np.log(share[share > 0])).sum() / np.log(n)) if n > 1 else 1.0,
           "half_set": float((np.searchsorted(np.cumsum(srt), 0.5 - 1e-12) + 1) / n),
           "used": float((counts > 0).mean())}
    pop = pd.DataFrame({"expert": np.arange(n), "lookups": counts, "share": share,
                        "rank": np.argsort(np.argsort(-counts, kind="stable"), kind="stable") + 1})
    time = np.repeat(np.arange(tokens), k)
    run = np.repeat(np.searchsorted(runs, np.arange(tokens), side="right") - 1, k)
    order = np.lexsort((time, experts.ravel(), run))
    t, e, r = time[order], experts.ravel()[order], run[order]
    same = (e[1:] == e[:-1]) & (r[1:] == r[:-1])
    dist = np.diff(t)[same]
    pairs = tokens - (len(runs) - 1)
    row["overlap"] = float((dist == 1).sum() / (k * pairs)) if pairs else np.nan
    row["overlap_uniform"] = k / n
    row["reuse_median"] = float(np.median(dist)) if len(dist) else np.nan
    row["reuse_count"], row["pairs"] = int((dist == 1).sum()), pairs
    row["gate_top"], row["gate_top_share"] = _gate_mass(gates)
    first = int(len(t) - same.sum())
    return row, pop, _reuse_frame(dist, first), _working_set(t, e, r, same, runs, n)


def _gini(counts: np.ndarray) -> float:
    x = np.sort(counts).astype(float)
    m = len(x)
    return float((2 * np.arange(1, m + 1) - m - 1).dot(x) / (m * x.sum())) if x.sum() else 0.0


def _gate_mass(gates: np.ndarray | None) -> tuple[float, float]:
    if gates is None:
        return np.nan, np.nan
    top, total = gates.max(axis=1), gates.sum(axis=1)
    ok = total > 0
    return float(top.mean()), float((top[ok] / total[ok]).mean()) if ok.any() else np.nan


def _reuse_frame(dist: np.ndarray, first: int) -> pd.DataFrame:
    edges = [1, 2, 3, 5, 9, 17, 33, 65, 129, 257]
    counts = np.bincount(np.searchsorted(edges, dist, side="right") - 1, minlength=len(edges)).tolist() + [first]
    total = sum(counts)
    return pd.DataFrame({"distance": REUSE_BINS, "lookups": counts,
                         "fraction": [c / total if total else np.nan for c in counts]})


def _working_set(t, e, r, same, runs, n) -> pd.DataFrame:
    """Mean distinct experts over every window of N tokens inside a run: an expert is absent from a
    window exactly when the window lies inside one of its gaps (tokens between two uses, before the
    first, after the last, or the whole run when unused), and a gap of g tokens holds g - N + 1 windows."""
    lengths = np.diff(runs)
    start, end = runs[:-1][r], runs[1:][r]
    head = np.r_[True, ~same]  # the first lookup of an (run, expert)
    tail = np.r_[~same, True]
    gaps = np.concatenate([np.diff(t)[same] - 1, t[head] - start[head], end[tail] - 1 - t[tail]])
    present = np.bincount(r[head], minlength=len(lengths))
    absent = n - present  # per run: experts never used there, each a gap of the whole run
    rows = []
    for window in 2 ** np.arange(int(np.log2(max(lengths.max(), 1))) + 1):
        windows = np.maximum(lengths - window + 1, 0)
        if not windows.sum():
            break
        missing = np.maximum(gaps - window + 1, 0).sum() + (absent * windows).sum()
        distinct = (n * windows.sum() - missing) / windows.sum()
        rows.append({"window": int(window), "distinct": float(distinct), "fraction": float(distinct / n)})
    return pd.DataFrame(rows, columns=["window", "distinct", "fraction"])


def _pooled(summary: pd.DataFrame, reuse: pd.DataFrame, k: int, n: int) -> dict:
    pairs = summary["pairs"].sum()
    row = {c: summary[c].mean() for c in ("top_share", "gini", "entropy", "half_set", "used", "gate_top",
                                          "gate_top_share")}
    return {**row, "layer": "all", "tokens": int(summary["tokens"].sum()), "runs": int(summary["runs"].sum()),
            "overlap": float(summary["reuse_count"].sum() / (k * pairs)) if pairs else np.nan,
            "overlap_uniform": k / n, "reuse_median": _binned_median(reuse)}


def _binned_median(reuse: pd.DataFrame) -> float:
    """The pooled median reuse distance's bin (its lower edge), from the per-layer histograms."""
    counts = reuse[reuse["distance"] != "first"].groupby("distance", sort=False)["lookups"].sum()
    if not counts.sum():
        return np.nan
    label = counts.index[int(np.searchsorted(np.cumsum(counts.to_numpy()), counts.sum() / 2))]
    return float(label.lstrip(">").split("-")[0])


def _pooled_reuse(reuse: pd.DataFrame) -> pd.DataFrame:
    pooled = reuse.groupby("distance", sort=False, as_index=False)["lookups"].sum()
    return pooled.assign(fraction=pooled["lookups"] / pooled["lookups"].sum(), layer="all")
