"""``workbench ledger``: list, show, edit verdicts, export and merge the attempt ledger, and import
what a failed ledger write left in an unrecorded-results dump.

``--ledger PATH`` is accepted before the subcommand and after it. Reading a ledger that does not
exist (a mistyped path) is one line and exit 2; only ``merge``, which records, creates one.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from workbench.cli.commands.ledger_cells import echo_table, effect, integer, model_name, ms, records
from workbench.cli.options import RefuseRepeats
from workbench.errors import LedgerError, ParamError
from workbench.records import USER_VERDICTS, format_spread, plural
from workbench.output.untrusted import for_terminal

_LEDGER_HELP = "Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite)."


class _LedgerGroup(RefuseRepeats, click.Group):
    """The ``ledger`` group, refusing a one-value option given twice like every command."""


def _ledger_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--ledger`` after the subcommand too (``workbench ledger list --ledger X``)."""
    return click.option("--ledger", "sub_ledger", type=click.Path(dir_okay=False), default=None,
                        help=_LEDGER_HELP)(fn)


@click.group(cls=_LedgerGroup)
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None, help=_LEDGER_HELP)
@click.pass_context
def ledger(ctx: click.Context, ledger_path: str | None) -> None:
    """Read, edit, export and merge the attempt ledger."""
    ctx.obj = ledger_path


def _opened(ctx: click.Context, sub_ledger: str | None, create: bool = False, readonly: bool = False) -> Any:
    """The ledger named before or after the subcommand (both: they must agree); ``readonly`` for the
    commands that only read (list, show, export), which then change nothing in the file."""
    from workbench.ledger import Ledger

    led = Ledger(_ledger_path(ctx, sub_ledger), create=create, readonly=readonly)
    ctx.call_on_close(led.close)
    return led


def _ledger_path(ctx: click.Context, sub_ledger: str | None) -> str | None:
    before = ctx.parent.obj if ctx.parent is not None else None
    if before and sub_ledger and Path(before) != Path(sub_ledger):
        raise ParamError(f"workbench ledger {ctx.info_name}", "--ledger",
                         f"given twice with different paths ({before}, {sub_ledger})")
    return sub_ledger or before


@ledger.command("list")
@click.option("--campaign", default=None, help="Only this campaign's attempts.")
@_ledger_option
@click.pass_context
def list_(ctx: click.Context, campaign: str | None, sub_ledger: str | None) -> None:
    """One line per attempt, oldest first."""
    led = _opened(ctx, sub_ledger, readonly=True)
    frame = led.attempts(campaign)
    if frame.empty:
        known = ", ".join(led.campaigns()["name"]) or "none"
        click.echo(for_terminal(f"no attempts{f' in campaign {campaign!r}' if campaign else ''} (campaigns: {known})"))
        return
    rows = [
        (a["id"][:8], a["campaign"], a["host"], a["model"] or model_name(a["file_path"]), a["label"], a["cache"] or "",
         ms(a["median_s"]), format_spread(a["spread_pct"], a["n"], a["stable"]), integer(a["n"]), effect(a),
         a["verdict_text"])
        for a in records(frame)
    ]
    echo_table(("id", "campaign", "host", "model", "change", "cache", "median", "spread", "n", "vs baseline",
                 "verdict"), rows)


@ledger.command("show")
@click.argument("attempt_id")
@_ledger_option
@click.pass_context
def show(ctx: click.Context, attempt_id: str, sub_ledger: str | None) -> None:
    """An attempt (unique id prefix of ≥ 6 characters is enough) and its runs."""
    from workbench.cli.commands.ledger_show import show_attempt

    show_attempt(_opened(ctx, sub_ledger, readonly=True), attempt_id)


@ledger.command("verdict")
@click.argument("attempt_id")
@click.argument("verdict", type=click.Choice(USER_VERDICTS))
@click.option("--note", default="", help="Why (kept in the attempt's notes and verdict history).")
@_ledger_option
@click.pass_context
def verdict(ctx: click.Context, attempt_id: str, verdict: str, note: str, sub_ledger: str | None) -> None:
    """Record a person's verdict on an attempt."""
    led = _opened(ctx, sub_ledger)
    full = led.set_verdict(attempt_id, verdict, note)
    across = led.attempt(full).get("baseline_across")
    # a verdict on a ratio against another model, state or device: said where the person reads it
    click.echo(f"{full[:8]}: {verdict}" + (for_terminal(f" (its ratio is ACROSS: {across})") if across else ""))


@ledger.command("export")
@click.option("--csv", "csv_path", type=click.Path(), default=None,
              help="Directory (attempts.csv, runs.csv), a .csv path (+ <stem>_runs.csv), or - for the "
                   "attempts on standard output.")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Markdown file, or - for standard output.")
@click.option("--figures", "figures_dir", type=click.Path(file_okay=False), default=None,
              help="Directory for the campaign's figures: <key>.png and .svg each, and figures.html "
                   "(interactive). Needs --campaign.")
@click.option("--campaign", default=None, help="Only this campaign.")
@click.option("--all", "all_attempts", is_flag=True,
              help="Every attempt in the Markdown table (default: the latest finished one per configuration).")
@click.option("--force", is_flag=True,
              help="Replace an existing ledger or model file at an output path (never the ledger exported).")
@_ledger_option
@click.pass_context
def export(ctx: click.Context, csv_path: str | None, md_path: str | None, figures_dir: str | None,
           campaign: str | None, all_attempts: bool, force: bool, sub_ledger: str | None) -> None:
    """Write CSV, a PR-ready Markdown table and/or the campaign's figures."""
    from workbench.ledger import export_csv, export_markdown, markdown_table
    from workbench.ledger.export import attempts_frame, write_csv

    if not csv_path and not md_path and not figures_dir:
        raise ParamError("workbench ledger export", "--csv/--markdown/--figures",
                         "give --csv PATH, --markdown PATH and/or --figures DIR")
    if csv_path == "-" and md_path == "-":
        raise ParamError("workbench ledger export", "-", "only one of --csv and --markdown can go to standard output")
    if figures_dir and not campaign:
        raise ParamError("workbench ledger export", "--figures", "figures are a campaign's: give --campaign NAME")
    led = _opened(ctx, sub_ledger, readonly=True)
    written = []
    if csv_path == "-":
        write_csv(attempts_frame(led, campaign), sys.stdout)
    elif csv_path:
        written += export_csv(led, csv_path, campaign, force=force)
    if md_path == "-":
        click.echo(markdown_table(led, campaign, all_attempts))
    elif md_path:
        written.append(export_markdown(led, md_path, campaign, all_attempts, force=force))
    to_stdout = "-" in (csv_path, md_path)
    for path in written:  # beside data on standard output, say it where it does not mix in
        click.echo(for_terminal(f"wrote {path}"), err=to_stdout)
    if figures_dir:
        _export_figures(led, campaign, figures_dir, to_stdout, force)


def _export_figures(led: Any, campaign: str, directory: str, to_stdout: bool, force: bool) -> None:
    from workbench.ledger.report import write_figures

    done = write_figures(led, campaign, directory, force=force)
    n = len(done.images) // 2
    if done.note:
        click.echo(for_terminal(done.note), err=True)
    click.echo(for_terminal(f"wrote {plural(n, 'figure')} as PNG and SVG and the interactive {done.interactive} "
                            f"in {directory}" if n else f"wrote the interactive {done.interactive}"), err=to_stdout)


@ledger.command("merge")
@click.argument("other", type=click.Path(dir_okay=False))
@_ledger_option
@click.pass_context
def merge(ctx: click.Context, other: str, sub_ledger: str | None) -> None:
    """Import another machine's ledger (idempotent: merging twice adds nothing)."""
    if not Path(other).is_file():  # before this ledger is opened (and perhaps created)
        raise LedgerError(other, "no such ledger file")
    counts = _opened(ctx, sub_ledger, create=True).merge(other)
    added = {k: v for k, v in counts.items() if not k.startswith(("skipped_", "attempts_running_here"))}
    click.echo(", ".join(f"{table}: +{count}" for table, count in added.items()))
    why = {"skipped_attempts": "attempt(s) recorded under this machine's name",
           "skipped_ceilings": "ceiling(s) of this machine",
           "attempts_running_here": "attempt(s) running here and finished there, kept as they are"}
    skipped = [f"{count} {why.get(key) or key.removeprefix('skipped_').replace('_', ' ') + ' row(s) of attempts held here'}"
               for key, count in counts.items() if count and (key.startswith("skipped_") or key in why)]
    if skipped:  # a merge only adds: what it did not take, and why, in one line
        click.echo("not taken (a merge never attaches to or rewrites a row this ledger holds): " + "; ".join(skipped))


@ledger.command("upgrade")
@_ledger_option
@click.pass_context
def upgrade(ctx: click.Context, sub_ledger: str | None) -> None:
    """Bring a ledger written by an older workbench to this one's schema, in place (reading commands
    never do; commands that record do it on their own)."""
    from workbench.ledger import Ledger
    from workbench.ledger.reading import read_version
    from workbench.ledger.schema import resolve_path

    path = resolve_path(_ledger_path(ctx, sub_ledger))
    before = read_version(path)  # a missing, foreign or newer file: one line, nothing written
    with Ledger(path, create=False) as led:  # opening to record brings it up to date
        after = led.schema_version
    click.echo(for_terminal(f"{path}: schema version {before} → {after}" if before != after else
                            f"{path}: already at schema version {after}; nothing changed"))


@ledger.command("import-unrecorded")
@click.argument("dump", type=click.Path(dir_okay=False))
@click.option("--campaign", default=None,
              help="Campaign for a dump that does not name one (older dumps); default: 'default'.")
@_ledger_option
@click.pass_context
def import_unrecorded(ctx: click.Context, dump: str, campaign: str | None, sub_ledger: str | None) -> None:
    """Record what a failed ledger write left in a workbench-unrecorded-*.json dump (idempotent:
    importing twice adds nothing)."""
    from workbench.measure.run.unrecorded_import import import_unrecorded as record, read_dump

    read_dump(dump)  # a file that is no dump is one line before the ledger is opened (or created)
    done = record(_opened(ctx, sub_ledger, create=True), dump, campaign=campaign)
    words = {"imported": "imported", "completed": "completed", "present": "already present"}
    for item in done:
        runs = f" (+{item.runs_added} runs)" if item.status != "present" else ""
        click.echo(f"{item.ledger_id[:8]}  {for_terminal(item.label)}: {words[item.status]}{runs}")
    count = {status: sum(i.status == status for i in done) for status in words}
    click.echo(for_terminal(f"{plural(len(done), 'attempt')} in {Path(dump).name}: {count['imported']} imported, {count['completed']} "
                            f"completed, {count['present']} already present; "
                            f"{plural(sum(i.runs_added for i in done), 'run')} added"))
