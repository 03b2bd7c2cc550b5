"""Notebook 07's plotly figures: what a routing trace is like, and hit rate against cache size per policy.

They read a trace's statistics (:class:`~workbench.expert.traces.TraceStats` frames) and a simulation
(:meth:`Simulation.to_json() <workbench.expert.policies.simulate.Simulation.to_json>`), not the ledger, so
they live beside the notebook's actions; the replayed session's measured hit rate is one marker on the
simulated curve of its policy.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from workbench.output.untrusted import for_html

_POOLED = "all"


def popularity_figure(stats: Any) -> Any:
    """A heat map: each layer's experts by rank (1: its most routed), the share of the layer's lookups."""
    import plotly.graph_objects as go

    pop = stats.popularity
    table = pop.pivot(index="layer", columns="rank", values="share").sort_index()
    fig = go.Figure(go.Heatmap(z=table.to_numpy(), x=list(table.columns), y=[str(x) for x in table.index],
                               colorscale="Viridis", colorbar={"title": "share"},
                               hovertemplate="layer %{y}, rank %{x}: %{z:.3f} of lookups<extra></extra>"))
    uniform = 1 / stats.n_experts
    fig.update_layout(title=f"Expert popularity per layer (by rank; uniform = {uniform:.3f} each)",
                      xaxis_title="expert rank in its layer (1 = most routed)", yaxis_title="layer",
                      height=max(300, 14 * len(table) + 160))
    return fig


def overlap_figure(stats: Any) -> Any:
    """Per layer: the share of a token's experts the previous token also used, against uniform routing's."""
    import plotly.graph_objects as go

    rows = stats.summary[stats.summary["layer"] != _POOLED]
    pooled = stats.summary[stats.summary["layer"] == _POOLED].iloc[0]
    fig = go.Figure(go.Bar(x=[str(x) for x in rows["layer"]], y=rows["overlap"], name="trace",
                           hovertemplate="layer %{x}: %{y:.3f}<extra></extra>"))
    fig.add_hline(y=float(pooled["overlap_uniform"]), line_dash="dash",
                  annotation_text=f"uniform routing (k/n = {pooled['overlap_uniform']:.3f})")
    fig.update_layout(title=f"Overlap with the previous token per layer (all layers: {pooled['overlap']:.3f})",
                      xaxis_title="layer", yaxis_title="fraction of a token's experts", yaxis_range=[0, 1])
    return fig


def reuse_figure(stats: Any) -> Any:
    """The reuse distance distribution of every lookup, all layers pooled ('first': none before it in its run)."""
    import plotly.graph_objects as go

    reuse = stats.reuse[stats.reuse["layer"] == _POOLED]
    fig = go.Figure(go.Bar(x=list(reuse["distance"]), y=reuse["fraction"],
                           hovertemplate="%{x} tokens: %{y:.3f} of lookups<extra></extra>"))
    fig.update_layout(title="Reuse distance: tokens since the layer last used the expert (all layers)",
                      xaxis_title="tokens (1 = the previous token)", yaxis_title="fraction of lookups")
    return fig


def working_set_figure(stats: Any) -> Any:
    """Distinct experts in a window of N tokens, as a fraction of the layer's experts: one line a layer."""
    import plotly.graph_objects as go

    ws = stats.working_set
    fig = go.Figure()
    for layer, frame in ws.groupby(ws["layer"].astype(str), sort=False):
        pooled = layer == _POOLED
        fig.add_trace(go.Scatter(x=frame["window"], y=frame["fraction"], mode="lines+markers" if pooled else "lines",
                                 name="all layers (mean)" if pooled else f"layer {layer}",
                                 line={"width": 4 if pooled else 1, "color": "black" if pooled else None},
                                 opacity=1.0 if pooled else 0.5))
    fig.update_layout(title="Working set: distinct experts in a window of N tokens", xaxis_type="log",
                      xaxis_title="window (tokens)", yaxis_title="fraction of the layer's experts", yaxis_range=[0, 1.02])
    return fig


def hit_rate_figure(doc: Mapping[str, Any], measured: Sequence[Mapping[str, Any]] = ()) -> Any:
    """Hit rate against the per-layer cache size, a line per policy and Belady's bound (dashed); each
    ``measured`` session ({policy, cache_experts, hit_rate, simulated}) a cross beside a ring at what the
    simulator predicts for the tokens it replayed (the curves cover the whole trace)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    names = list(dict.fromkeys(r["policy"] for r in doc["results"]))
    for name in names:
        rows = sorted((r for r in doc["results"] if r["policy"] == name), key=lambda r: r["cache_experts"])
        bound = name == "belady"
        fig.add_trace(go.Scatter(
            x=[r["cache_experts"] for r in rows], y=[r["hit_rate"] for r in rows], mode="lines+markers",
            name="Belady's MIN (bound)" if bound else for_html(name),
            line={"dash": "dash", "color": "black", "width": 3} if bound else {},
            customdata=[r["of_belady"] for r in rows],
            hovertemplate="N=%{x}: %{y:.3f}" + ("" if bound else " (%{customdata:.2f} of Belady's)") + "<extra></extra>"))
    for m in measured:
        fig.add_trace(go.Scatter(x=[m["cache_experts"]], y=[m["simulated"]], mode="markers",
                                 name=for_html(f"simulated: {m['policy']} over the replayed tokens"),
                                 marker={"symbol": "circle-open", "size": 16, "color": "red"},
                                 hovertemplate="simulated replay, N=%{x}: %{y:.3f}<extra></extra>"))
        fig.add_trace(go.Scatter(x=[m["cache_experts"]], y=[m["hit_rate"]], mode="markers",
                                 name=for_html(f"measured: {m['policy']} session"),
                                 marker={"symbol": "x", "size": 14, "color": "red"},
                                 hovertemplate="session, N=%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=f"Hit rate vs cache size per policy against Belady's bound ({doc['tokens']} tokens, "
                            f"k={doc['k']} of {doc['n_experts']})",
                      xaxis_title="experts each layer's cache holds (N)", yaxis_title="hit rate", yaxis_range=[0, 1.02])
    return fig
