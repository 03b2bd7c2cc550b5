"""The parameter-grid heat map (threads × chunk for warmer and lanes …) and log-axis ticks a reader can read.

One panel per model file, strategy and cache state: two files are never averaged into one cell, and
when one configuration was measured more than once on a file its latest attempt is the cell (the
title says so). Axis titles are the parameters in words with their units (``chunk (MiB)``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

import plotly.graph_objects as go

from workbench.records import model_display_name
from workbench.output.untrusted import for_plotly

if TYPE_CHECKING:
    import pandas as pd

MAX_COLUMNS = 3  # panels per row: more would squeeze each grid's labels unreadable
_UNITS = {"_mib": "MiB", "_kib": "KiB", "_kb": "KiB", "_gib": "GiB", "_s": "s", "_ms": "ms"}


def axis_label(param: str) -> str:
    """``chunk_mib`` → ``chunk (MiB)``, ``cold_threads`` → ``cold threads``."""
    for suffix, unit in _UNITS.items():
        if param.endswith(suffix) and len(param) > len(suffix):
            return f"{param[:-len(suffix)].replace('_', ' ')} ({unit})"
    return param.replace("_", " ")


def log_ticks(low: float, high: float) -> dict[str, list[Any]]:
    """``tickvals``/``ticktext`` for a log axis over [low, high]: 1, 2 and 5 of every decade, each
    written whole (``0.2``, ``2``, ``20``), never plotly's bare minor digits that read the same."""
    if not (low > 0 and high > 0):
        return {}
    low, high = min(low, high), max(low, high)
    values = [m * 10.0 ** e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
              for m in (1, 2, 5) if low <= m * 10.0 ** e <= high]
    if len(values) < 2:  # a range inside one 1-2-5 step: its ends, still written whole
        values = sorted({low, high})
    return {"tickvals": values, "ticktext": [tick_text(v) for v in values]}


def tick_text(value: float) -> str:
    """A tick written whole: 0.05, 0.2, 2, 20, 5,000, 2e+06 past a million."""
    if value >= 1e6:
        return f"{value:.0e}".replace("e+0", "e+")
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def threads_chunk_heatmap(attempts: pd.DataFrame,
                          axes: Mapping[str, tuple[str, str]] | None = None) -> go.Figure | None:
    """GB/s over each strategy's parameter grid, one panel per file, strategy and cache state.

    ``axes`` maps a strategy to its (rows, columns) parameters; by default what the registered
    strategies declare as ``Params.heatmap_axes`` (threads × chunk_mib for warmer and lanes). None
    when the campaign has no attempt with both parameters.
    """
    from plotly.subplots import make_subplots

    if axes is None:
        from workbench.strategies import heatmap_axes

        axes = heatmap_axes()
    panels, repeated = _heatmap_panels(attempts, axes)
    if not panels:
        return None
    cols = min(MAX_COLUMNS, len(panels))
    rows_n = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows_n, cols=cols, subplot_titles=[for_plotly(t) for t, _, _ in panels],
                        horizontal_spacing=0.12, vertical_spacing=max(0.08, 0.3 / rows_n))
    for i, (_, (rows, columns), table) in enumerate(panels):
        row, col = divmod(i, cols)
        fig.add_trace(go.Heatmap(
            z=table.values, x=[for_plotly(c) for c in table.columns], y=[for_plotly(r) for r in table.index],
            coloraxis="coloraxis", texttemplate="%{z:.3g}",
            hovertemplate=f"{axis_label(rows)} %{{y}}, {axis_label(columns)} %{{x}}<br>%{{z:.3g}} GB/s<extra></extra>"),
            row=row + 1, col=col + 1)
        fig.update_xaxes(title_text=axis_label(columns), type="category", row=row + 1, col=col + 1)
        fig.update_yaxes(title_text=axis_label(rows), type="category", row=row + 1, col=col + 1)
    grids = " / ".join(dict.fromkeys(f"{axis_label(r)} × {axis_label(c)}" for _, (r, c), _ in panels))
    title = f"Median GB/s by {grids}" + (" (latest attempt per cell)" if repeated else "")
    fig.update_layout(title=title, coloraxis=dict(colorscale="Viridis", colorbar=dict(title="GB/s")),
                      template="plotly_white", margin=dict(l=70, r=30, t=90, b=60),
                      height=120 + 330 * rows_n)
    return fig


def _heatmap_panels(attempts: pd.DataFrame, axes: Mapping[str, tuple[str, str]]
                    ) -> tuple[list[tuple[str, tuple[str, str], pd.DataFrame]], bool]:
    rows = []
    files = _file_names(attempts)
    for a in attempts.dropna(subset=["gbps"]).to_dict("records"):
        params, grid = a["params"] or {}, axes.get(a["strategy"])
        if grid and grid[0] in params and grid[1] in params:
            panel = " · ".join(p for p in (files.get(a["id"], ""), a["strategy"], _cache(a["cache"])) if p)
            rows.append({"panel": panel, "grid": grid, "row": _number(params[grid[0]]),
                         "col": _number(params[grid[1]]), "gbps": float(a["gbps"])})
    if not rows:
        return [], False
    import pandas as pd

    frame = pd.DataFrame(rows)  # attempts come oldest first: "last" is the latest attempt
    repeated = bool(frame.duplicated(["panel", "row", "col"]).any())
    return [(panel, group["grid"].iloc[0],
             group.pivot_table(index="row", columns="col", values="gbps", aggfunc="last"))
            for panel, group in frame.groupby("panel", sort=False)], repeated


def _file_names(attempts: pd.DataFrame) -> dict[str, str]:
    """attempt id → its model file's name (with the hash prefix when two files share a name)."""
    if "file_path" not in attempts:
        return {}
    hashes = attempts["file_hash"] if "file_hash" in attempts else [""] * len(attempts)
    names = {i: (model_display_name(p) if isinstance(p, str) and p else "", str(h or "")[-8:])
             for i, p, h in zip(attempts["id"], attempts["file_path"], hashes)}
    clash: dict[str, set[str]] = {}
    for name, digest in names.values():
        clash.setdefault(name, set()).add(digest)
    return {i: f"{name} [{digest}]" if len(clash[name]) > 1 and digest else name for i, (name, digest) in names.items()}


def _number(value: Any) -> float | int:
    number = float(value)
    return int(number) if number.is_integer() else number


def _cache(value: Any) -> str:
    text = "" if value is None or (isinstance(value, float) and value != value) else str(value)
    return "asis" if text.startswith("asis") else text or "asis"
