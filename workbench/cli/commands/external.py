"""``workbench external``: time an external engine's load up to a log marker, interleaved A/B with verdicts."""
from __future__ import annotations

from typing import Any, Sequence

import click

from workbench.cli import numbers
from workbench.cli.commands.measure_options import measure_options
from workbench.cli.commands.results_out import Progress, report_results, unrecorded_printed
from workbench.cli.exits import EXIT_HELP_EXTERNAL, finish_external, tally_attempts
from workbench.measure.run.order import DEFAULT_ORDER, ORDERS


@click.command(epilog=EXIT_HELP_EXTERNAL)
@click.option("--cmd", "commands", multiple=True, required=True,
              help="The engine's command line, run as an argument list (shell quoting, no shell unless "
                   "--shell); repeat for an A/B — the first is the baseline.")
@click.option("--label", "labels", multiple=True, help="Name of each attempt in tables, one per --cmd.")
@click.option("--marker", "markers", multiple=True, required=True,
              help="Regular expression of the output line that ends the load: one for all, or one per --cmd.")
@click.option("--start-marker", "start_markers", multiple=True,
              help="Regular expression of the line that starts the load window (else: spawn); spawn → end "
                   "marker is then the run's wall. One for all, or one per --cmd.")
@click.option("--phase", "phases", multiple=True, metavar="RE",
              help="The engine's own phase lines: a regular expression with groups (?P<name>…) and "
                   "(?P<ms>…) or (?P<s>…), matched on every line up to the marker (repeatable).")
@click.option("--binary", "binaries", multiple=True, metavar="PATH",
              help="The file that identifies each build, one per --cmd ('' = resolve from the command: "
                   "its executable, or interpreter + script).")
@click.option("--shell", is_flag=True, help="Run the commands through /bin/sh instead of as argument lists.")
@click.option("--expect-exit", "expect_exits", multiple=True, type=numbers.count(-255, 255), metavar="CODE",
              help="The exit status that is no failure when an engine exits on its own after the marker "
                   "(default 0; any other fails the run): one for all, or one per --cmd.")
@click.option("--file", "file", required=True, type=click.Path(exists=True),
              help="The model the command loads — a file, or a directory / index file / shard of a set: "
                   "the cache state of every file, the identity, GB/s.")
@click.option("--device", default=None,
              help="The device the engine loads onto: the lock held and the device recorded "
                   "(host, cuda[:n], hip[:n]; default: the best available, cuda, hip, else host).")
@click.option("--order", type=click.Choice(ORDERS), default=DEFAULT_ORDER, show_default=True,
              help="Order inside each round: abba alternates A B, B A (drift cancels in pairs), abab repeats "
                   "A B, shuffle is seeded by --seed.")
@click.option("--seed", type=numbers.seed(), default=0, show_default=True, help="Seed of --order shuffle.")
@click.option("--time-only", is_flag=True,
              help="Accept runs without evidence that the engine read --file (time only, no GB/s): exit 0 "
                   "instead of 4.")
@measure_options
def external(commands: tuple[str, ...], labels: tuple[str, ...], markers: tuple[str, ...],
             start_markers: tuple[str, ...], phases: tuple[str, ...], binaries: tuple[str, ...], shell: bool,
             expect_exits: tuple[int, ...],
             file: str, device: str | None, order: str, seed: int, time_only: bool, cache: str, runs: int,
             campaign: str,
             hypothesis: str, baseline: str | None, ledger_path: str | None, min_effect_pct: float,
             timeout_s: float, as_json: bool, baseline_across: bool) -> None:
    """Time external engines: spawn (or --start-marker) → the first output line matching --marker, then
    kill the process group. Several --cmd are measured interleaved, one attempt each, with verdicts.

    GB/s is shown only with evidence that the engine read --file's own bytes in the window (how far its
    descriptors on the model's files read, their pages it had mapped, the pages it brought into the page
    cache); otherwise the run says "no evidence the engine read MODEL", shows its time only, and the
    command exits 4 unless --time-only."""
    from workbench.measure.engine.command import check_command, describe_build
    from workbench.measure.engine.evidence import evidence_tally
    from workbench.measure.engine.external import EngineCommand, measure_engines
    from workbench.output.untrusted import for_terminal
    from workbench.measure.run.runner import open_ledger, require_device

    n = len(commands)
    if labels and len(labels) != n:
        raise click.UsageError(f"{len(labels)} --label for {n} --cmd")
    if device is not None:  # a device not here is refused as run --device refuses it, before anything else
        require_device(device)
    engines = [EngineCommand(cmd, marker, start_marker=start or None, phases=phases, shell=shell,
                             binary=binary or None, label=label, expect_exit=code)
               for cmd, marker, start, binary, label, code in zip(
                   commands, _per_command(markers, n, "--marker"), _per_command(start_markers, n, "--start-marker"),
                   _per_command(binaries, n, "--binary"), labels or [""] * n,
                   _per_command(expect_exits, n, "--expect-exit"))]
    for engine in engines:  # before the ledger opens or a bar draws: a bad command is one line, nothing else
        _, files = check_command(engine, timeout_s)
        if not as_json:  # what identifies each build, so a hash that stays the same says why
            click.echo(for_terminal(f"build of {engine.display()}: {describe_build(files)}"), err=True)
    if device is None:
        from workbench.upload import best_device

        device = best_device()
        if not as_json:
            click.echo(f"device: {device} (the best available here; --device names the engine's)", err=True)
    ledger = open_ledger(ledger_path)
    with unrecorded_printed(ledger, as_json, n == 1, []), Progress(n * runs, as_json) as progress:
        results = measure_engines(engines, file, runs=runs, cache=cache, order=order, seed=seed,
                                  timeout_s=timeout_s, device=device, baseline=baseline, ledger=ledger,
                                  campaign=campaign, hypothesis=hypothesis, progress=progress,
                                  min_effect=min_effect_pct / 100, baseline_across=baseline_across)
    report_results(results, ledger, as_json, single=n == 1)
    lacking = [evidence_tally(r.runs) for r in results]
    finish_external(tally_attempts(results), sum(x[0] for x in lacking), sum(x[1] for x in lacking),
                    next((x[2] for x in lacking if x[0]), "the model"), time_only)


def _per_command(values: Sequence[Any], n: int, option: str) -> list[Any]:
    """One value per command: none given, one for all, or exactly one each."""
    if not values:
        return [None] * n
    if len(values) == 1:
        return list(values) * n
    if len(values) != n:
        raise click.UsageError(f"{len(values)} {option} for {n} --cmd: give one for all, or one per --cmd")
    return list(values)
