"""``workbench trace``: routing traces from engines — what they are like (``stats``) and a generator
fitted to one (``fit``). Every trace format of :mod:`workbench.expert.traces` is read; a bad trace is one
line and exit 2."""
from __future__ import annotations

import json

import click

from workbench.cli.options import RefuseRepeats

_TRACE_HELP = ("TRACE: .csv rows token,layer,expert; .jsonl records {layer, token, experts, gating_probs}; "
               ".npy (N, 3) rows or [tokens, layers, k].")


class _TraceGroup(RefuseRepeats, click.Group):
    """The ``trace`` group, refusing a one-value option given twice like every command."""


@click.group(cls=_TraceGroup)
def trace() -> None:
    """Routing traces: statistics, a fitted generator."""


@trace.command("stats", epilog=_TRACE_HELP)
@click.argument("path", metavar="TRACE", type=click.Path(exists=True, dir_okay=False))
@click.option("--summary", is_flag=True, help="Only the pooled row (all layers), not one a layer.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {source, n_experts, k, summary, popularity, reuse, working_set} (records per frame).")
def stats(path: str, summary: bool, as_json: bool) -> None:
    """Per-layer expert popularity and its skew, overlap with the previous token, reuse distances, the
    working set in a window of N tokens, and the top expert's gate mass."""
    from workbench.cli.commands.trace_text import describe, echo_stats
    from workbench.expert.traces import read_trace, trace_stats

    tr = read_trace(path)
    result = trace_stats(tr)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    click.echo(describe(tr))
    echo_stats(result, all_layers=not summary)
