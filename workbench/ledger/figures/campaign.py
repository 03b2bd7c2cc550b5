"""plotly figures from the ledger's DataFrames (``Ledger.attempts()``, ``.runs()``, ``.ceilings()``).

Each function takes frames and returns a ``plotly.graph_objects.Figure`` (or None when the campaign
has nothing for it), so notebooks, the HTML report and tests share one drawing of each fact.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

import plotly.graph_objects as go

from workbench.ledger.figures.files import file_residency
from workbench.ledger.figures.heatmap import log_ticks, threads_chunk_heatmap, tick_text
from workbench.records import PHASES
from workbench.output.untrusted import for_plotly

if TYPE_CHECKING:
    import pandas as pd

CACHE_COLORS = {"cold": "#1f77b4", "warm": "#d62728", "asis": "#7f7f7f"}
WALL_COLORS = ("#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=30, t=60, b=60), height=420)


def attempt_names(attempts: pd.DataFrame) -> list[str]:
    """One readable, unique name per attempt: ``label · cache`` (+ id prefix when two collide), cleaned for
    plotly (labels are untrusted text: :func:`workbench.output.untrusted.for_plotly`)."""
    names = [f"{_text(l) or _text(s)} · {_cache(c)}" for l, s, c in
             zip(attempts["label"], attempts["strategy"], attempts["cache"])]
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    return [for_plotly(f"{n} [{str(i)[:6]}]" if seen[n] > 1 else n) for n, i in zip(names, attempts["id"])]


def median_with_range(attempts: pd.DataFrame) -> go.Figure:
    """Median load time per attempt with min–max error bars, coloured by cache state."""
    frame = attempts.assign(name=attempt_names(attempts)).dropna(subset=["median_s"])
    fig = go.Figure()
    for cache, group in frame.groupby(frame["cache"].map(_cache), sort=False):
        ms = group["median_s"] * 1000
        fig.add_trace(go.Scatter(
            x=group["name"], y=ms, mode="markers", name=for_plotly(cache), marker=dict(size=11, color=_color(cache)),
            error_y=dict(type="data", symmetric=False, array=group["max_s"] * 1000 - ms,
                         arrayminus=ms - group["min_s"] * 1000, thickness=1.5, width=6),
            customdata=list(zip(group["verdict_text"].map(for_plotly), group["n"], group["spread_pct"])),
            hovertemplate="%{x}<br>median %{y:.2f} ms<br>verdict %{customdata[0]}"
                          "<br>n %{customdata[1]}, spread %{customdata[2]:.1f} %<extra></extra>"))
    fig.update_layout(title="Load time per attempt: median, whiskers min–max", yaxis_title="load window (ms)",
                      yaxis_rangemode="tozero", **_LAYOUT)
    return _empty_note(fig, frame.empty, "no finished attempt with a successful run")


def gbps_vs_ceilings(attempts: pd.DataFrame, ceilings: pd.DataFrame | None) -> go.Figure:
    """GB/s per attempt as bars, and this machine's measured walls as horizontal lines."""
    frame = attempts.assign(name=attempt_names(attempts)).dropna(subset=["gbps"])
    fig = go.Figure(go.Bar(
        x=frame["name"], y=frame["gbps"], marker_color=[_color(_cache(c)) for c in frame["cache"]],
        text=[f"{g:.2f}" for g in frame["gbps"]], textposition="outside", name="attempts (blue cold, red warm)",
        hovertemplate="%{x}<br>%{y:.2f} GB/s<extra></extra>"))
    walls = key_ceilings(ceilings)
    title = "GB/s against this machine's ceilings"
    if not walls:
        title += " (none measured here: run `workbench ceilings`)"
    top = float(frame["gbps"].max()) if not frame.empty else 0.0
    # Walls far above the bars would flatten them; a log axis keeps both readable.
    log = bool(walls) and top > 0 and max(walls.values()) / top > 5
    for i, (name, gbps) in enumerate(sorted(walls.items(), key=lambda w: -w[1])):
        line = dict(color=WALL_COLORS[i % len(WALL_COLORS)], dash="dash", width=2)
        fig.add_hline(y=gbps, line=line)
        # Named in the legend rather than by annotations, which pile up when two walls are close.
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=line,
                                 name=for_plotly(f"{name}: {gbps:.2f} GB/s")))
    axis: dict[str, Any] = dict(title="GB/s (bytes / median load window)", type="log" if log else "linear")
    if log:
        low = float(frame["gbps"][frame["gbps"] > 0].min())
        high = max(walls.values()) * 2
        axis.update(range=[math.log10(low / 2), math.log10(high)], **log_ticks(low / 2, high))
    fig.update_layout(title=title, yaxis=axis, showlegend=bool(walls),
                      **{**_LAYOUT, "height": 480})
    return _empty_note(fig, frame.empty, "no attempt has a GB/s figure")


def key_ceilings(ceilings: pd.DataFrame | None) -> dict[str, float]:
    """The walls worth drawing: best cold read, best page-cache read, memcpy, pageable and pinned H2D."""
    if ceilings is None or ceilings.empty:
        return {}
    walls: dict[str, float] = {}
    # Names may carry a "host:" prefix (a campaign from several machines): match the wall after it,
    # and pick the best per host so one machine's wall never stands in for another's.
    host = ceilings["name"].str.rpartition(":")[0]
    wall = ceilings["name"].str.rpartition(":")[2]
    for prefix in ("cold_read_", "page_cache_read_", "memcpy"):
        for _, rows in ceilings[wall.str.startswith(prefix)].groupby(host[wall.str.startswith(prefix)]):
            best = rows.loc[rows["gbps"].idxmax()]
            walls[str(best["name"])] = float(best["gbps"])
    h2d = ceilings[wall.str.contains(r"^h2d_.*_(?:pageable|pinned)$")]
    walls.update({str(n): float(g) for n, g in zip(h2d["name"], h2d["gbps"])})
    return walls


def phase_bars(attempts: pd.DataFrame, runs: pd.DataFrame) -> go.Figure:
    """Median seconds per phase stacked per attempt: a strategy's (index, prefetch, staging, read, upload, sync),
    an external engine's own phase lines in the order they arrive, plus its ``unattributed`` rest of
    spawn → end marker that no phase line accounts for (start-up, imports, device init)."""
    names = dict(zip(attempts["id"], attempt_names(attempts)))
    ok = runs[runs["error"].isna() & runs["attempt_id"].isin(names)]
    external = set(attempts["id"][attempts["kind"] == "external"]) if "kind" in attempts else set()
    per_run = [_run_phases(row, row["attempt_id"] in external) for row in ok.to_dict("records")]
    ok = ok.assign(all_phases=per_run)
    medians = {aid: _phase_medians(group["all_phases"]) for aid, group in ok.groupby("attempt_id", sort=False)}
    order = [aid for aid in attempts["id"] if aid in medians]
    fig = go.Figure()
    for phase in _phase_order(ok):
        shown = for_plotly(phase).replace("%", "%%")  # an engine's phase name: untrusted, and no template
        fig.add_trace(go.Bar(name=for_plotly(phase), x=[names[a] for a in order],
                             y=[medians[a].get(phase, 0.0) * 1000 for a in order],
                             hovertemplate=f"%{{x}}<br>{shown} %{{y:.2f}} ms<extra></extra>"))
    title = "Where the load window goes: median per phase"
    if external & set(order):
        title += " (an engine's bar: spawn → end marker)"
    fig.update_layout(barmode="stack", title=title, yaxis_title="ms", **_LAYOUT)
    return _empty_note(fig, not order, "no successful run with a phase trace")


UNATTRIBUTED = "unattributed"


def _run_phases(row: Mapping[str, Any], external: bool) -> dict[str, float]:
    """A run's phases; for an engine also what spawn → end marker leaves to no phase line."""
    phases = {str(k): float(v) for k, v in (row.get("phases") or {}).items()}
    if external:
        result = row.get("result") or {}
        total = result.get("marker_s", row.get("load_s"))
        if total is not None and total == total:
            phases[UNATTRIBUTED] = max(0.0, float(total) - sum(phases.values()))
    return phases


def _phase_order(runs: pd.DataFrame) -> list[str]:
    """The strategies' phases in load order, then engine phases in the order their lines came (median
    place among a run's phase lines, then median seconds after spawn), then the unattributed rest."""
    import statistics

    present: dict[str, None] = {}
    arrivals: dict[str, list[tuple[float, int]]] = {}  # (seconds after spawn, place among the run's lines)
    for phases, result in zip(runs["all_phases"], runs["result"]):
        present.update(dict.fromkeys(phases))
        for place, line in enumerate((result or {}).get("phases") or ()):
            arrivals.setdefault(str(line["name"]), []).append((float(line.get("at_s", 0.0)), place))

    def arrival(name: str) -> tuple[float, float, str]:
        seen = arrivals.get(name)  # the place in the run first: lines read in one chunk share a time
        if not seen:
            return math.inf, math.inf, name
        return statistics.median(p for _, p in seen), statistics.median(t for t, _ in seen), name

    # An engine's phase is ordered by its lines even when it shares a strategy phase's name ("index").
    known = [p for p in PHASES if p in present and p not in arrivals]
    engine = sorted((p for p in present if p not in known and p != UNATTRIBUTED), key=arrival)
    return known + engine + ([UNATTRIBUTED] if UNATTRIBUTED in present else [])


def _phase_medians(phases: pd.Series) -> dict[str, float]:
    import pandas as pd

    # A phase line an engine did not print in some run took no time in that run.
    table = pd.DataFrame([p or {} for p in phases]).fillna(0.0)
    return {k: float(v) for k, v in table.median(numeric_only=True).items()}


def resident_before(attempts: pd.DataFrame, runs: pd.DataFrame) -> go.Figure:
    """Page-cache residency measured before each run, by run order: a mislabelled state stands out.

    Cold runs belong at 0, warm runs at 1; a run whose requested state was not reached is drawn as a
    red cross whatever its label says.
    """
    names = dict(zip(attempts["id"], attempt_names(attempts)))
    frame = runs[runs["attempt_id"].isin(names)].dropna(subset=["resident_before"])
    fig = go.Figure()
    for state, group in frame.groupby("cache_state", sort=False):
        fig.add_trace(go.Scatter(
            x=group["position"], y=group["resident_before"], mode="markers", name=f"asked {state}",
            marker=dict(size=9, color=_color(str(state))), text=[names[a] for a in group["attempt_id"]],
            hovertemplate="run %{x}: %{text}<br>resident %{y:.1%}<extra></extra>"))
    missed = frame[frame["cache_reached"] == False]  # noqa: E712 - None means unknown, not missed
    if not missed.empty:
        fig.add_trace(go.Scatter(
            x=missed["position"], y=missed["resident_before"], mode="markers", name="state NOT reached",
            marker=dict(size=15, symbol="x-thin", line=dict(width=3, color="red")),
            text=[names[a] for a in missed["attempt_id"]],
            hovertemplate="run %{x}: %{text}<br>NOT reached, resident %{y:.1%}<extra></extra>"))
    for y, label in ((0.0, "cold"), (1.0, "warm")):
        fig.add_hline(y=y, line_dash="dot", line_color=_color(label), opacity=0.5)
    fig.update_layout(title="Resident before each run (mincore)", xaxis_title="run position (interleaved order)",
                      yaxis=dict(title="fraction of the file resident", range=[-0.05, 1.05], tickformat=".0%"),
                      **_LAYOUT)
    return _empty_note(fig, frame.empty, "no run recorded its residency")


def h2d_lines(frame: pd.DataFrame) -> go.Figure:
    """Host→device GB/s against transfer size, one line per path (from ``h2d.results_frame``)."""
    fig = go.Figure()
    measured = frame.dropna(subset=["gbps"])
    for path, group in measured.groupby("path", sort=False):
        group = group.sort_values("size")
        fig.add_trace(go.Scatter(x=group["size_mib"], y=group["gbps"], mode="lines+markers", name=str(path),
                                 hovertemplate=f"{path}<br>%{{x:g}} MiB: %{{y:.2f}} GB/s<extra></extra>"))
    device = ", ".join(sorted(set(map(str, frame["device"])))) if len(frame) else "?"
    # Every measured size is a tick, written whole: plotly's minor log ticks read "2" for 0.2 and 20.
    sizes = sorted(set(float(s) for s in measured["size_mib"])) if not measured.empty else []
    ticks = {"tickvals": sizes, "ticktext": [tick_text(s) for s in sizes]} if sizes else {}
    fig.update_layout(title=f"Host→device copy paths on {device}",
                      xaxis=dict(title="transfer size (MiB)", type="log", **ticks),
                      yaxis=dict(title="GB/s (median)", rangemode="tozero"), **_LAYOUT)
    return _empty_note(fig, measured.empty, "no path measured")


def campaign_figures(attempts: pd.DataFrame, runs: pd.DataFrame,
                     ceilings: pd.DataFrame | None = None) -> dict[str, go.Figure]:
    """Every figure that applies to a campaign, by a short key, in reading order."""
    figures = {
        "median": median_with_range(attempts),
        "gbps": gbps_vs_ceilings(attempts, ceilings),
        "phases": phase_bars(attempts, runs),
        "resident": resident_before(attempts, runs),
    }
    per_file = file_residency(attempts, runs)  # a model of several files: each file's own cache state
    if per_file is not None:
        figures["resident_files"] = per_file
    heat = threads_chunk_heatmap(attempts)
    if heat is not None:
        figures["threads_chunk"] = heat
    return figures


def _cache(value: Any) -> str:
    text = _text(value)
    return "asis" if text.startswith("asis") else text or "asis"


def _color(cache: str) -> str:
    return CACHE_COLORS.get(cache, "#7f7f7f")


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _empty_note(fig: go.Figure, empty: bool, why: str) -> go.Figure:
    if empty:
        fig.add_annotation(text=why, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig
