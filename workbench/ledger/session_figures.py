"""plotly figures of long sessions, from the ledger's ``turns`` frame (``Ledger.turns()``).

One line per session attempt, turn on the x axis: what a leak looks like (a line that climbs turn over
turn) against a cost (a flat offset). Notebook 04, the campaign report and tests share these drawings.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

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
                 lambda t: (t["actual_anon_bytes"] - t["accounted_bytes"]) / MiB),
    "faults": ("Page faults per turn (minor; major dashed)", "faults", lambda t: t["minflt"]),
    "tokens_per_s": ("Decode tokens per second, per turn", "tokens/s", lambda t: t["tokens_per_s"]),
}


def session_names(turns: pd.DataFrame, attempts: pd.DataFrame | None = None) -> dict[str, str]:
    """attempt id → ``label [id prefix]`` (the id keeps two sessions with one label apart)."""
    labels = {} if attempts is None else dict(zip(attempts["id"], attempts["label"]))
    return {a: f"{labels.get(a, 'session')} [{str(a)[:6]}]" for a in dict.fromkeys(turns["attempt_id"])}


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
