"""The per-rank spread of multi-rank loads: each rank's window on the run's one clock, run by run."""
from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from workbench.output.untrusted import for_plotly

if TYPE_CHECKING:
    import pandas as pd


def rank_windows(ranks: pd.DataFrame, names: dict[str, str]) -> go.Figure:
    """One bar per rank per run, from its start to its end (ms after the run's first rank started); the
    slowest rank of each run darker. ``ranks``: :func:`workbench.ledger.ranks.ranks_frame`."""
    fig = go.Figure()
    for slowest, colour in ((False, "#7fa7d9"), (True, "#1f3f7a")):
        part = ranks[ranks["slowest"] == slowest]
        labels = [f"{for_plotly(names.get(a, str(a)[:8]))} · run {p} · rank {r}"
                  for a, p, r in zip(part["attempt_id"], part["position"], part["rank"])]
        fig.add_trace(go.Bar(y=labels, x=part["load_s"] * 1e3, base=part["start_after_s"] * 1e3, orientation="h",
                             marker_color=colour, name="slowest rank" if slowest else "other ranks",
                             customdata=part["vs_median"],
                             hovertemplate="%{y}<br>%{base:.1f} → %{x:.1f} ms (%{customdata:.2f}× median)<extra></extra>"))
    fig.update_layout(title="Each rank's load on the run's clock (the slowest rank is the result)",
                      xaxis_title="ms after the first rank started", template="plotly_white", barmode="overlay",
                      height=max(300, 22 * len(ranks) + 120), margin=dict(l=260, r=30, t=60, b=60))
    return fig
