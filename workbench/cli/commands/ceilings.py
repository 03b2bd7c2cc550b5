"""``workbench ceilings``: this machine's bandwidth walls, stored in the ledger for the host."""
from __future__ import annotations

import json

import click

from workbench.cli import numbers
from workbench.cli.options import refuse_duplicates
from workbench.output.untrusted import for_terminal

CEILINGS_SIZE = "512MiB"  # the scratch file `workbench ceilings` reads unless told


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, exists=True), default=None,
              help="Directory on the file system to measure (default: cwd).")
@click.option("--device", "devices", multiple=True, help="Backend(s) for host→device copies (default: host).")
@click.option("--size", default=None, help=f"Scratch file size, e.g. 256MiB, 2GiB (default: {CEILINGS_SIZE}).")
@click.option("--threads", type=numbers.count(1, numbers.MAX_THREADS), default=None, help="Most reader threads (default: cores).")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--json", "as_json", is_flag=True, help="Print the ceilings as JSON.")
@click.option("--file", "model_file", type=click.Path(exists=True), default=None,
              help="Also read this model whole — every file of a set (a directory, index file or shard) — "
                   "cold and warm: the walls its loads are held against.")
@click.option("--refresh", is_flag=True,
              help="Measure again the way this host's recorded ceilings were (their directory, size, devices "
                   "and model file); options given here win.")
def ceilings(directory: str | None, devices: tuple[str, ...], size: str | None, threads: int | None,
             ledger_path: str | None, as_json: bool, model_file: str | None, refresh: bool) -> None:
    """Measure this machine's bandwidth walls and store them in the ledger for this host, with the date
    and the load-path settings they were measured under."""
    from workbench.formats.synth import parse_size
    from workbench.measure.ceilings.age import refresh_plan
    from workbench.measure.ceilings.walls import measure_ceilings, thread_counts
    from workbench.measure.run.runner import open_ledger

    refuse_duplicates("workbench ceilings", "--device", devices)
    ledger = open_ledger(ledger_path)
    plan = refresh_plan(ledger) if refresh else {}
    say = None if as_json else (lambda msg: click.echo(for_terminal(f"measuring {msg} …"), err=True))
    report = measure_ceilings(directory or plan.get("directory"), devices=devices or plan.get("devices") or ("host",),
                              size=parse_size(size) if size else plan.get("size") or parse_size(CEILINGS_SIZE),
                              threads=thread_counts(threads) if threads else None, ledger=ledger,
                              progress=say, file=model_file or plan.get("file"))
    if as_json:
        click.echo(json.dumps({**report.to_json(), "ledger": str(ledger.path)}, indent=2))
        return
    from workbench.measure.run.tables import ceilings_table

    click.echo(ceilings_table(report))
    for name, reason in report.skipped:
        click.secho(for_terminal(f"not measured: {name}: {reason}"), fg="yellow", err=True)
    click.echo(for_terminal(f"ledger: {ledger.path} (host {report.host})"))
