"""plotly figures of session A/Bs and of where a session's time went, from plain frames.

``cells`` frames have one row per A/B cell: ``arm``, ``round`` and one column per metric (``tok/s``,
``residual ms/token``, ``staged GB/s``, ``unreleased pages``, ``shift MiB/token`` …). ``turns`` frames
are the ledger's, with the decode fields in ``extra``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

if TYPE_CHECKING:
    import pandas as pd

_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=30, t=60, b=60), height=400,
               legend=dict(orientation="h", yanchor="bottom", y=-0.35))
_PARTS = (("compute_s", "compute"), ("stall_read_s", "waiting for reads"), ("stall_upload_s", "waiting for uploads"),
          ("stall_route_s", "routing"), ("bookkeeping_s", "cache bookkeeping"),
          ("other_s", "the rest (before bookkeeping was timed: with it)"))


def ab_cells(cells: pd.DataFrame, metric: str) -> go.Figure:
    """One point per cell, arms side by side, the round on hover: the spread a verdict is drawn from."""
    fig = go.Figure()
    for arm, g in cells.groupby("arm", sort=False):
        fig.add_trace(go.Box(y=g[metric], name=str(arm), boxpoints="all", jitter=0.3, pointpos=0,
                             customdata=g["round"], hovertemplate="round %{customdata}<br>%{y:.3g}<extra></extra>"))
    fig.update_layout(title=f"Session A/B: {metric} per cell (each cell a fresh worker, ABBA order)",
                      yaxis_title=metric, showlegend=False, **_LAYOUT)
    return fig


def time_split(turns: pd.DataFrame, names: dict[str, str]) -> go.Figure:
    """Seconds per token by cause for each session (its turns summed): compute, stalls, bookkeeping."""
    fig = go.Figure()
    rows = []
    for attempt_id, t in turns.groupby("attempt_id", sort=False):
        extra = [e if isinstance(e, dict) else {} for e in t["extra"]]
        tokens = float(t["tokens"].sum())
        rows.append((names.get(attempt_id, str(attempt_id)[:8]),
                     [sum(max(0.0, e.get(key, 0.0)) for e in extra) / tokens * 1e3 for key, _ in _PARTS]))
    for n, (_, label) in enumerate(_PARTS):
        fig.add_trace(go.Bar(x=[r[0] for r in rows], y=[r[1][n] for r in rows], name=label,
                             hovertemplate="%{x}<br>%{y:.2f} ms/token<extra></extra>"))
    fig.update_layout(title="Where a token's time went (ms per token, by cause)", yaxis_title="ms / token",
                      barmode="stack", **_LAYOUT)
    return fig
