"""plotly figures of MoE expert loads and long sessions, from the ledger's frames (attempts, runs, turns).

Sessions: one line per session attempt, turn on the x axis — what a leak looks like (a line that
climbs turn over turn) against a cost (a flat offset). Expert loads: per-expert against blob uploads,
bounce against in-place reads, and the shift-copy bytes each paid. Notebooks 03 and 04, the campaign
report and tests share these drawings.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from workbench.ledger.sessions import anon_gap_mib
from workbench.output.untrusted import for_plotly

if TYPE_CHECKING:
    import pandas as pd

_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=30, t=60, b=60), height=400,
               legend=dict(orientation="h", yanchor="bottom", y=-0.35))
MiB = 1 << 20

# (key, title, y axis, value per turn row)
_METRICS = {
    "unreleased": ("Unreleased pages per turn (committed, touched by no live entry)", "pages",
                   lambda t: t["unreleased_pages"]),
    "anon_gap": ("Process anonymous memory the cache does not account for, per turn", "MiB",
                 lambda t: anon_gap_mib(t)),  # less what the cache handed back lazily (MADV_FREE)
    "faults": ("Page faults per turn (minor; major dashed)", "faults", lambda t: t["minflt"]),
    "tokens_per_s": ("Decode tokens per second, per turn", "tokens/s", lambda t: t["tokens_per_s"]),
}


def session_names(turns: pd.DataFrame, attempts: pd.DataFrame | None = None) -> dict[str, str]:
    """attempt id → ``label [id prefix]`` (the id keeps two sessions with one label apart)."""
    labels = {} if attempts is None else dict(zip(attempts["id"], attempts["label"]))
    return {a: for_plotly(f"{labels.get(a, 'session')} [{str(a)[:6]}]") for a in dict.fromkeys(turns["attempt_id"])}


def turn_metric(turns: pd.DataFrame, key: str, attempts: pd.DataFrame | None = None) -> go.Figure:
    """One of :data:`_METRICS` per turn, one line per session."""
    title, axis, value = _METRICS[key]
    names = session_names(turns, attempts)
    fig = go.Figure()
    for attempt_id, t in turns.groupby("attempt_id", sort=False):
        t = t.sort_values("turn")
        fig.add_trace(go.Scatter(x=t["turn"], y=value(t), mode="lines+markers", name=names[attempt_id],
                                 hovertemplate="turn %{x}<br>%{y:,.1f} " + axis + "<extra></extra>"))
        if key == "faults":
            fig.add_trace(go.Scatter(x=t["turn"], y=t["majflt"], mode="lines", line=dict(dash="dash"),
                                     name=f"{names[attempt_id]} major", showlegend=False))
    fig.update_layout(title=title, xaxis_title="turn", yaxis_title=axis, **_LAYOUT)
    return fig


def session_figures(turns: pd.DataFrame, attempts: pd.DataFrame | None = None) -> dict[str, go.Figure]:
    """Every per-turn figure, keyed ``session_<metric>``; empty when there are no turns."""
    if turns.empty:
        return {}
    return {f"session_{key}": turn_metric(turns, key, attempts) for key in _METRICS}


def run_counters(runs: pd.DataFrame) -> pd.DataFrame:
    """attempt_id → the strategy's counters of its first run (``shift_copy_bytes``, ``inplace_bytes`` …)."""
    import pandas as pd

    rows = {}
    for attempt_id, result in zip(runs["attempt_id"], runs["result"]):
        counters = ((result or {}).get("result") or {}).get("counters") or {}
        rows.setdefault(attempt_id, counters)
    return pd.DataFrame.from_dict(rows, orient="index").fillna(0)


def slices_median(attempts: pd.DataFrame, group: str = "alignment") -> go.Figure:
    """Median load time per method (x), one bar group per value of ``attempts[group]`` and cache state."""
    fig = go.Figure()
    frame = attempts.dropna(subset=["median_s"])
    for (value, cache), g in frame.groupby([group, "cache"], sort=False):
        err = dict(type="data", symmetric=False, array=(g["max_s"] - g["median_s"]) * 1000,
                   arrayminus=(g["median_s"] - g["min_s"]) * 1000)
        fig.add_trace(go.Bar(x=g["method"].map(for_plotly), y=g["median_s"] * 1000,
                             name=for_plotly(f"{group} {value} · {cache}"), error_y=err,
                             hovertemplate="%{x}<br>median %{y:.1f} ms<extra></extra>"))
    fig.update_layout(title="Median load time: per-expert vs blob, bounce vs in place (whiskers min–max)",
                      yaxis_title="load window (ms)", barmode="group", **_LAYOUT)
    return fig


def shift_copy_bars(attempts: pd.DataFrame, counters: pd.DataFrame, group: str = "alignment") -> go.Figure:
    """MiB memcpy'd out of O_DIRECT bounce buffers per load: experts' share and the rest (dense tensors)."""
    frame = attempts[attempts["id"].isin(counters.index) & (attempts["strategy"] == "odirect")]
    names = [for_plotly(f"{m} · {group} {v} · {c}") for m, v, c in zip(frame["method"], frame[group], frame["cache"])]
    expert = [counters.loc[i].get("expert_shift_copy_bytes", 0) / MiB for i in frame["id"]]
    total = [counters.loc[i].get("shift_copy_bytes", 0) / MiB for i in frame["id"]]
    fig = go.Figure([go.Bar(x=names, y=expert, name="expert blobs"),
                     go.Bar(x=names, y=[t - e for t, e in zip(total, expert)], name="dense tensors")])
    fig.update_layout(title="Shift-copy MiB per load (O_DIRECT bounce → payload): zero for placed blobs",
                      yaxis_title="MiB", barmode="stack", **_LAYOUT)
    return fig


def session_ends(summary: pd.DataFrame) -> go.Figure:
    """What each session shows when it ends: unreleased pages, single-shot beside long, release off beside on."""
    fig = go.Figure(go.Bar(x=summary["session"], y=summary["unreleased_last"],
                           marker_color=["#d62728" if "off" in str(s) else "#2ca02c" for s in summary["session"]],
                           text=summary["unreleased_last"], textposition="outside"))
    fig.update_layout(title="Unreleased pages at the end: a single short turn cannot tell release off from on",
                      yaxis_title="pages", **_LAYOUT)
    return fig
