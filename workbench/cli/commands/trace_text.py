"""What ``workbench trace stats`` and ``trace fit`` print: a trace's statistics as terminal text."""
from __future__ import annotations

import math
from typing import Any

import click

from workbench.cli.commands.ledger_cells import echo_table
from workbench.untrusted import for_terminal

_HEADER = ("layer", "tokens", "runs", "top×n", "gini", "entropy", "half", "used", "overlap", "uniform",
           "reuse p50", "gate top", "top share")


def describe(trace: Any) -> str:
    """One line: what the trace holds."""
    gaps = "none" if trace.complete else "some (statistics stay inside runs of consecutive tokens)"
    layers = "MoE layers counted from 0" if trace.layer_kind == "ordinal" else "layers"
    return (f"{for_terminal(trace.source)}: {len(trace.layers)} {layers}, {trace.tokens} tokens, k={trace.k} of "
            f"{trace.n_experts} experts, gate weights: {'yes' if trace.gates is not None else 'no'}, gaps: {gaps}")


def echo_stats(stats: Any, *, all_layers: bool = True) -> None:
    """The summary table (every layer, or the pooled row only), the reuse distances and the working set."""
    summary = stats.summary if all_layers else stats.summary[stats.summary["layer"] == "all"]
    echo_table(_HEADER, [_summary_row(r) for r in summary.to_dict(orient="records")])
    reuse = stats.reuse[stats.reuse["layer"] == "all"]
    click.echo("reuse distance, tokens (all layers, fraction of lookups): "
               + "  ".join(f"{d}: {f:.3f}" for d, f in zip(reuse["distance"], reuse["fraction"])))
    ws = stats.working_set[stats.working_set["layer"] == "all"]
    click.echo("working set, window of N tokens (all layers, fraction of the experts): "
               + "  ".join(f"{w}: {f:.3f}" for w, f in zip(ws["window"], ws["fraction"])))


def _summary_row(r: dict) -> tuple:
    return (r["layer"], r["tokens"], r["runs"], _num(r["top_share"], 2), _num(r["gini"]), _num(r["entropy"]),
            _num(r["half_set"]), _num(r["used"]), _num(r["overlap"]), _num(r["overlap_uniform"]),
            _num(r["reuse_median"], 0), _num(r["gate_top"]), _num(r["gate_top_share"]))


def _num(value: float, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"
