"""Per-file page-cache residency of a model of several files, from the ledger's runs.

A sharded model's cache state is a fact per file: a cold run needs every shard evicted, and a load
that reads one shard twice or skips one shows up in what stays resident after it. Each run records
every file's resident fraction before it (``runs.resident_files``, measured by the runner) and after
its load (``resident_after_files`` in the worker's report, ``runs.result``). This module turns both
into one long frame, a table (one row per file, a min–max range per cache state) and a heat map
(files × runs, before and after). Nothing here applies to a one-file model: each returns None there.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

import plotly.graph_objects as go

from workbench.records import model_display_name
from workbench.output.untrusted import for_plotly

if TYPE_CHECKING:
    import pandas as pd

FRAME_COLUMNS = ("model", "file", "run", "attempt_id", "position", "cache_state", "before", "after")
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=30, t=80, b=60))


def file_residency_frame(attempts: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, file) of every run whose model has several files: the model (its path as the
    attempt records it), the file name, the run (1, 2, … in the ledger's order: attempt, then position;
    positions restart with each comparison), its attempt, position and asked cache state, and the
    file's resident fraction before the run and after its load (NaN where a run did not record it)."""
    import pandas as pd

    models = dict(zip(attempts["id"], attempts["file_path"]))
    rows = []
    for k, run in enumerate(runs[runs["attempt_id"].isin(models)].to_dict("records"), 1):
        before = _fractions(run.get("resident_files"))
        after = _fractions((run.get("result") or {}).get("resident_after_files"))
        names = list(dict.fromkeys([*before, *after]))
        if len(names) < 2:
            continue  # a one-file model: the model-wide residency says it all
        for name in names:
            rows.append((str(models[run["attempt_id"]]), name, k, run["attempt_id"], int(run["position"]),
                         str(run["cache_state"]), before.get(name, math.nan), after.get(name, math.nan)))
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def file_residency_table(attempts: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame | None:
    """One row per file of each multi-file model: its size (from the attempt's recorded members) and,
    per cache state asked, the resident fraction before the runs and after their loads as ``min–max``
    over the runs; None when no run measured a model of several files."""
    import pandas as pd

    frame = file_residency_frame(attempts, runs)
    if frame.empty:
        return None
    sizes = _member_sizes(attempts)
    several = frame["model"].nunique() > 1
    rows = []
    for (model, name), group in frame.groupby(["model", "file"], sort=False):
        row: dict[str, Any] = {"model": _model_name(model)} if several else {}
        size = sizes.get((model, name))
        row.update({"file": name, "MiB": None if size is None else round(size / 2**20, 2),
                    "runs": group["run"].nunique()})
        for state, runs_in in group.groupby("cache_state", sort=False):
            row[f"{state}: before"] = _range(runs_in["before"])
            row[f"{state}: after"] = _range(runs_in["after"])
        rows.append(row)
    return pd.DataFrame(rows)


def file_residency(attempts: pd.DataFrame, runs: pd.DataFrame) -> go.Figure | None:
    """Heat maps, files × run position: each file's resident fraction before the run (left) and after
    its load (right); a cold run that left a shard resident, or a warm one that found one evicted, is
    one odd cell. None when no run measured a model of several files."""
    from plotly.subplots import make_subplots

    frame = file_residency_frame(attempts, runs)
    if frame.empty:
        return None
    several = frame["model"].nunique() > 1
    frame = frame.assign(row=[for_plotly(f"{_model_name(m)}/{f}" if several else f)
                              for m, f in zip(frame["model"], frame["file"])])
    rows = list(dict.fromkeys(frame["row"]))
    order = sorted(frame["run"].unique())
    states = frame.groupby("run")["cache_state"].first()
    labels = dict(zip(attempts["id"], attempts["label"]))
    ran = frame.groupby("run")["attempt_id"].first().map(lambda a: for_plotly(str(labels.get(a) or a)[:80]))
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("before the run (mincore)", "after the load"))
    for col, column in ((1, "before"), (2, "after")):
        grid = frame.pivot_table(index="row", columns="run", values=column, aggfunc="first", dropna=False)
        grid = grid.reindex(index=rows, columns=order)
        fig.add_trace(go.Heatmap(
            z=grid.values, x=[for_plotly(f"{k} {states[k]}") for k in order], y=rows, zmin=0, zmax=1,
            colorscale="Blues", showscale=col == 2, colorbar=dict(title="resident", tickformat=".0%"),
            customdata=[[ran[k] for k in order] for _ in rows], texttemplate="%{z:.0%}" if len(order) <= 12 else None,
            hovertemplate="%{y}<br>run %{x}: %{customdata}<br>" + column + " %{z:.1%}<extra></extra>"),
            row=1, col=col)
    n_files = len(rows)
    fig.update_layout(title=f"Resident per file, before and after each run ({n_files} files)",
                      height=max(320, 140 + 28 * n_files), **_LAYOUT)
    fig.update_xaxes(title_text="run (ledger order) and cache state asked", type="category")
    fig.update_yaxes(autorange="reversed")
    return fig


def _fractions(value: Any) -> dict[str, float]:
    """A file → fraction mapping as the ledger decodes it ({} for anything else: an old run, a bad row)."""
    if not isinstance(value, Mapping):
        return {}
    out = {}
    for name, fraction in value.items():
        try:
            out[str(name)] = float(fraction)
        except (TypeError, ValueError):
            continue
    return out


def _member_sizes(attempts: pd.DataFrame) -> dict[tuple[str, str], int]:
    """(model path, file name) → bytes, from each attempt's environment (``model_files``)."""
    sizes: dict[tuple[str, str], int] = {}
    for model, env in zip(attempts["file_path"], attempts["environment"]):
        members = env.get("model_files") if isinstance(env, Mapping) else None
        for member in members if isinstance(members, list) else ():
            if isinstance(member, Mapping) and isinstance(member.get("size"), int):
                sizes[(str(model), str(member.get("name")))] = member["size"]
    return sizes


def _range(values: Any) -> str:
    """``0 %``, ``0–3 %`` (min–max of the runs), or ``—`` when none recorded it."""
    found = [float(v) for v in values if v == v]
    if not found:
        return "—"
    low, high = round(min(found) * 100), round(max(found) * 100)
    return f"{low} %" if low == high else f"{low}–{high} %"


def _model_name(path: str) -> str:
    return model_display_name(str(path))
