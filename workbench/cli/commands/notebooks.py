"""``workbench sweep`` and ``workbench demo``: the notebooks as the driving surface."""
from __future__ import annotations

import sys

import click


@click.command()
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--resume", is_flag=True, help="Skip points whose output notebook already completed.")
@click.option("--dry-run", is_flag=True, help="List the points and their output notebooks; run nothing.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where output notebooks go (default data/runs/<campaign>).")
def sweep(sweep_file: str, resume: bool, dry_run: bool, ledger_path: str | None, out_dir: str | None) -> None:
    """Run SWEEP_FILE: one papermill execution per grid point, recorded in the ledger."""
    from pathlib import Path

    from workbench.ledger.schema import resolve_path
    from workbench.cli.sweep import (
        check_parameters, default_out_dir, describe_point, expand_grid, ledger_identity, load_sweep,
        point_completed, run_sweep,
    )

    spec = load_sweep(sweep_file)
    check_parameters(spec)
    out = Path(out_dir) if out_dir else default_out_dir(spec.campaign)
    points = expand_grid(spec)
    if dry_run:  # a dry run creates no ledger: a missing one holds no completed point
        ledger = resolve_path(ledger_path).resolve()
        lid = ledger_identity(ledger) if ledger.exists() else ""
        click.echo(f"{spec.path}: {spec.notebook.name}, campaign '{spec.campaign}', {len(points)} point(s)")
        for p in points:
            state = " (completed)" if point_completed(p.output(out), lid) else ""
            click.echo(f"  {p.index:3d}  {describe_point(p)}  → {p.output(out)}{state}")
        return

    def say(outcome) -> None:  # noqa: ANN001 - a PointOutcome
        if outcome.status == "failed":
            click.echo(f"  failed: {outcome.point.name}: {outcome.error} (notebook: {outcome.output})", err=True)

    report = run_sweep(spec, ledger_path=ledger_path, resume=resume, out_dir=out, on_point=say)
    click.echo(f"{report.count('done')} done, {report.count('skipped')} skipped (resumed), "
               f"{report.count('failed')} failed; notebooks in {report.out_dir}")
    if not report.ok:
        sys.exit(1)


@click.command()
@click.option("--size", default=None, help="Size of each synthetic model, e.g. 64MiB (default: the demo's).")
@click.option("--runs", type=int, default=None, help="Fresh-process runs per attempt (default: the demo's).")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Data directory for models, runs and reports (default ./data).")
def demo(size: str | None, runs: int | None, ledger_path: str | None, out_dir: str | None) -> None:
    """Synthetic dense + MoE models, the default sweep on the best device, ledger and report."""
    from workbench.cli.demo import DemoOptions, run_demo

    options = DemoOptions.build(size=size, runs=runs, ledger_path=ledger_path, data_dir=out_dir)
    result = run_demo(options, echo=click.echo)
    for line in result.summary_lines():
        click.echo(line)
    if not result.ok:
        sys.exit(1)
