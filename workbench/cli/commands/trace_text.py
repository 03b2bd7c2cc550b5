"""What ``workbench trace stats`` and ``trace fit`` print: a trace's statistics as terminal text."""
from __future__ import annotations

import math
from typing import Any

import click

from workbench.cli.commands.ledger_cells import echo_table
from workbench.output.untrusted import for_terminal

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


def echo_fit(result: Any, tokens: int) -> None:
    """The fitted parameters, the original's and the fitted trace's statistics side by side, the gaps."""
    m = result.model
    click.echo(f"fitted: stickiness {_spread(m.stickiness)}, recency {_spread(m.recency)}, memory "
               f"{_spread(m.memory, 0)} tokens")
    a = result.original.summary.set_index("layer").loc["all"]
    b = result.fitted.summary.set_index("layer").loc["all"]
    rows = [(name, _num(a[col], d), _num(b[col], d)) for name, col, d in (
        ("top share × experts", "top_share", 2), ("gini", "gini", 3), ("entropy", "entropy", 3),
        ("half set", "half_set", 3), ("overlap", "overlap", 3), ("reuse p50", "reuse_median", 0),
        ("gate top", "gate_top", 3), ("gate top share", "gate_top_share", 3))]
    wa, wb = (s.working_set[s.working_set["layer"] == "all"].set_index("window")["fraction"]
              for s in (result.original, result.fitted))
    rows += [(f"working set, {w} tokens", _num(wa[w]), _num(wb[w])) for w in wa.index if w in wb.index]
    echo_table(("all layers", "original", f"fitted ({tokens} tokens)"), rows)
    echo_table(("measure", "largest gap", "tolerance", "within", "source's halves"),
               [(r["measure"], _num(r["largest_gap"]), _num(r["tolerance"], 2), "yes" if r["within"] else "NO",
                 _num(r["source_halves_gap"])) for r in result.deviation.to_dict(orient="records")])
    for r in result.deviation.to_dict(orient="records"):
        if not r["within"]:
            own = r["source_halves_gap"]
            why = ("; the trace is too short to show its own spread (fewer than 4 tokens in a layer)" if math.isnan(own)
                   else "; the source's own halves stand as far apart (it is not stationary: a longer trace would "
                        "pin it)" if own >= r["largest_gap"] else "; the model does not capture it")
            click.echo(f"{r['measure']}: the fitted trace stands {r['largest_gap']:.3f} from the original, beyond "
                       f"{r['tolerance']:.2f}{why}")


def _spread(values: Any, digits: int = 2) -> str:
    lo, hi = float(min(values)), float(max(values))
    return f"{lo:.{digits}f}" if abs(hi - lo) < 10 ** -digits else f"{lo:.{digits}f}–{hi:.{digits}f}"
