"""``workbench sweep`` and ``workbench demo``: the notebooks as the driving surface."""
from __future__ import annotations

import shlex
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from workbench.cli import numbers
from workbench.cli.exits import EXIT_HELP, EXIT_RUNS_FAILED, RunTally, finish, tally_run
from workbench.records import plural
from workbench.output.untrusted import for_terminal, terminal_lines


@contextmanager
def _ctrl_c_latch():  # noqa: ANN202 - yields a callable
    """Ctrl-C raises KeyboardInterrupt as always, and is also remembered: the yielded callable says
    whether it came. A KeyboardInterrupt raised while Python runs a finalizer or a callback is printed
    and dropped ("Exception ignored in ..."), so a sweep asks after every point and stops there."""
    came = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield came.is_set
        return

    def on_sigint(signum: int, frame: Any) -> None:
        came.set()
        signal.default_int_handler(signum, frame)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield came.is_set
    finally:
        signal.signal(signal.SIGINT, previous)



@click.command(epilog=EXIT_HELP.replace("every run finished", "every point and run finished").replace(
    "3 a run failed", "3 a point or run failed"))
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--resume", is_flag=True, help="Skip points whose output notebook already completed.")
@click.option("--dry-run", is_flag=True, help="List the points and their output notebooks; run nothing.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where output notebooks go (default data/runs/<campaign>).")
def sweep(sweep_file: str, resume: bool, dry_run: bool, ledger_path: str | None, out_dir: str | None) -> None:
    """Run SWEEP_FILE: one papermill execution per grid point, recorded in the ledger."""
    from workbench.cli.sweep.execute import check_parameters, default_out_dir, expand_grid, load_sweep, run_sweep
    from workbench.ledger.schema import resolve_path

    spec = load_sweep(sweep_file)
    check_parameters(spec)
    out = Path(out_dir) if out_dir else default_out_dir(spec.campaign)
    points = expand_grid(spec)
    if dry_run:
        _dry_run(spec, points, out, resolve_path(ledger_path).resolve())
        return

    from workbench.ledger.schema import now

    done: list[Any] = []
    started = now()

    def say(outcome) -> None:  # noqa: ANN001 - a PointOutcome
        done.append(outcome)
        if outcome.status == "failed":
            click.echo(for_terminal(f"  failed: {outcome.point.name}: {outcome.error} (notebook: {outcome.output})"),
                       err=True)
        if interrupted():  # a Ctrl-C something swallowed (see _ctrl_c_latch): no further point starts
            raise KeyboardInterrupt

    try:
        with _ctrl_c_latch() as interrupted:
            report = run_sweep(spec, ledger_path=ledger_path, resume=resume, out_dir=out, on_point=say)
    except KeyboardInterrupt:
        finished = sum(o.status in ("done", "skipped") for o in done)
        click.secho(for_terminal(f"interrupted: {finished}/{len(points)} points completed (notebooks in {out}); the point "
                    "that was running is not marked completed, and its attempts were closed as failed: "
                    f"interrupted; resume with: workbench sweep {shlex.quote(sweep_file)} --resume"
                    + (f" --ledger {shlex.quote(ledger_path)}" if ledger_path else "")
                    + (f" --out {shlex.quote(out_dir)}" if out_dir else "")), fg="red", bold=True, err=True)
        sys.exit(130)
    click.echo(for_terminal(f"{report.count('done')} done, {report.count('skipped')} skipped (resumed), "
                            f"{report.count('failed')} failed; notebooks in {report.out_dir}"))
    failed_points = [f"{report.count('failed')}/{len(points)} points failed"] if not report.ok else []
    finish(_runs_since(ledger_path, spec.campaign, started), "runs recorded by this sweep", failed_points)


def _runs_since(ledger_path: str | None, campaign: str, since: str) -> RunTally:
    """What became of the runs this sweep recorded (a failed point is recorded as a failed run too)."""
    from workbench.ledger import Ledger
    from workbench.ledger.schema import resolve_path

    path = resolve_path(ledger_path)
    if not path.exists():
        return RunTally()
    with Ledger(path, create=False) as ledger:
        runs = ledger.runs(campaign=campaign)
    total = RunTally()
    for r in runs[runs["created"] >= since].to_dict("records"):
        error = None if _missing(r["error"]) else str(r["error"])
        ok = error is None and not _missing(r["load_s"])
        total += tally_run(error, ok, _flag(r["verified"]), r["cache_state"], _flag(r["cache_reached"]))
    return total


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _flag(value: Any) -> bool | None:
    return None if _missing(value) else bool(value)


def _dry_run(spec: Any, points: list[Any], out: Path, ledger: Path) -> None:
    """Each point, what it will measure and about how long that takes; runs nothing, creates nothing."""
    from workbench.cli.sweep.execute import describe_point, point_completed
    from workbench.cli.sweep.plan import RunHistory, describe_plan, notebook_defaults
    from workbench.ledger import Ledger

    lid, history = "", None
    if ledger.exists():  # a missing ledger holds no completed point and no history; read, never changed
        with Ledger(ledger, readonly=True) as opened:
            lid, history = opened.ledger_id, RunHistory(opened)
    defaults = notebook_defaults(spec.notebook)
    click.echo(for_terminal(f"{spec.path}: {spec.notebook.name}, campaign '{spec.campaign}', {plural(len(points), 'point')}"))
    for p in points:
        state = " (completed)" if point_completed(p.output(out), lid) else ""
        click.echo(for_terminal(f"  {p.index:3d}  {describe_point(p)}  → {p.output(out)}{state}"))
        click.echo(for_terminal(f"       {describe_plan(p, defaults, history)}"))


@click.command()
@click.option("--size", default=None, help="Size of each synthetic model, e.g. 64MiB (default: the demo's).")
@click.option("--runs", type=numbers.count(1, numbers.MAX_RUNS), default=None, help="Fresh-process runs per attempt (default: the demo's).")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Data directory for models, runs and reports (default ./data).")
@click.option("--shards", type=numbers.count(1, numbers.MAX_SHARDS), default=None,
              help="Write each model as a gguf-split set of this many files (default 1: one file).")
def demo(size: str | None, runs: int | None, ledger_path: str | None, out_dir: str | None,
         shards: int | None) -> None:
    """Synthetic dense + MoE models, the default sweep on the best device, ledger and report."""
    from workbench.cli.demo import DemoOptions, run_demo

    options = DemoOptions.build(size=size, runs=runs, ledger_path=ledger_path, data_dir=out_dir, shards=shards)
    try:
        result = run_demo(options, echo=lambda line: click.echo(for_terminal(line)))
    except KeyboardInterrupt:
        click.secho("interrupted: models, ceilings and every completed sweep point are kept; resume with: "
                    "workbench demo (with the same options): it skips what is done", fg="red", bold=True, err=True)
        sys.exit(130)
    click.echo(terminal_lines(result.summary_lines()))
    if not result.ok:
        sys.exit(EXIT_RUNS_FAILED)
