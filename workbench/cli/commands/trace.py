"""``workbench trace``: routing traces from engines — what they are like (``stats``) and a generator
fitted to one (``fit``). Every trace format of :mod:`workbench.expert.traces` is read; a bad trace is one
line and exit 2."""
from __future__ import annotations

import json

import click

from workbench.cli import numbers
from workbench.cli.options import RefuseRepeats
from workbench.output.untrusted import for_terminal
from workbench.cli.commands.trace_simulate import simulate

_EXPERTS_HELP = ("The model's experts per layer (default: the largest expert id in the trace + 1; an expert "
                 "never routed is still one of the model's).")
_TRACE_HELP = ("TRACE: .csv rows token,layer,expert; .jsonl records {layer, token, experts, gating_probs}; "
               ".npy (N, 3) rows or [tokens, layers, k].")


class _TraceGroup(RefuseRepeats, click.Group):
    """The ``trace`` group, refusing a one-value option given twice like every command."""


@click.group(cls=_TraceGroup)
def trace() -> None:
    """Routing traces: statistics, a fitted generator, per-layer cache policies simulated."""


@trace.command("stats", epilog=_TRACE_HELP)
@click.argument("path", metavar="TRACE", type=click.Path(exists=True, dir_okay=False))
@click.option("--experts", "n_experts", type=numbers.count(1, numbers.MAX_EXPERTS), default=None, help=_EXPERTS_HELP)
@click.option("--summary", is_flag=True, help="Only the pooled row (all layers), not one a layer.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {source, n_experts, k, summary, popularity, reuse, working_set} (records per frame).")
def stats(path: str, n_experts: int | None, summary: bool, as_json: bool) -> None:
    """Per-layer expert popularity and its skew, overlap with the previous token, reuse distances, the
    working set in a window of N tokens, and the top expert's gate mass."""
    from workbench.cli.commands.trace_text import describe, echo_stats
    from workbench.expert.traces import read_trace, trace_stats

    tr = read_trace(path)
    tr = tr.with_experts(n_experts) if n_experts else tr
    result = trace_stats(tr)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    click.echo(describe(tr))
    echo_stats(result, all_layers=not summary)


trace.add_command(simulate)  # per-layer cache policies against Belady's bound (issue 34 §2)


@trace.command("fit", epilog=_TRACE_HELP)
@click.argument("path", metavar="TRACE", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Parameter file to write (default: TRACE's name with .model.json, in this directory); "
                   "`workbench session --trace` takes it.")
@click.option("--tokens", type=numbers.count(1, numbers.MAX_TRACE_TOKENS), default=None,
              help="Tokens of the fitted trace compared with the original (default: the longer of the trace "
                   "and 10,000).")
@click.option("--seed", type=numbers.seed(), default=0, show_default=True, help="Seed of the fit and the synthesis.")
@click.option("--experts", "n_experts", type=numbers.count(1, numbers.MAX_EXPERTS), default=None, help=_EXPERTS_HELP)
@click.option("--write-trace", "write_trace", type=click.Path(dir_okay=False), default=None,
              help="Also write the fitted trace (.npy rows, .jsonl or .csv, by its suffix).")
@click.option("--json", "as_json", is_flag=True,
              help="Print {model, original, fitted, deviation} instead of the tables.")
def fit(path: str, out: str | None, tokens: int | None, seed: int, n_experts: int | None, write_trace: str | None,
        as_json: bool) -> None:
    """Fit a seeded generator (per-layer popularity, sticky experts, a recent history) to TRACE, write
    its parameters and show the fitted trace's statistics beside the original's."""
    import os

    from workbench.cli.commands.trace_text import describe, echo_fit
    from workbench.expert.traces import fit_trace, read_trace, save_model, trace_bytes
    from workbench.output.files import write_bytes

    tr = read_trace(path)
    tr = tr.with_experts(n_experts) if n_experts else tr
    out = out or os.path.splitext(os.path.basename(path))[0] + ".model.json"
    result = fit_trace(tr, seed=seed, tokens=tokens)
    save_model(result.model, out, inputs=(path,))
    n_tokens = int(result.fitted.summary.set_index("layer").loc["all", "tokens"])
    if write_trace:
        write_bytes(write_trace, trace_bytes(result.model.synthesize(n_tokens, seed=seed + 1), write_trace),
                    inputs=(path, out), force=True)
    if as_json:
        click.echo(json.dumps({"model": result.model.to_json(), "original": result.original.to_json(),
                               "fitted": result.fitted.to_json(),
                               "deviation": result.deviation.to_dict(orient="records")}, indent=2))
        return
    click.echo(describe(tr))
    echo_fit(result, n_tokens)
    click.echo(f"parameters: {for_terminal(out)}" + (f"; fitted trace: {for_terminal(write_trace)}" if write_trace else ""))
