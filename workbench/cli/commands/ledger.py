"""``workbench ledger``: list, show, edit verdicts, export and merge the attempt ledger."""
from __future__ import annotations

from typing import Any

import click

from workbench.errors import LedgerError
from workbench.records import USER_VERDICTS


@click.group()
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.pass_context
def ledger(ctx: click.Context, ledger_path: str | None) -> None:
    """Read, edit, export and merge the attempt ledger."""
    ctx.obj = ledger_path


def _opened(ctx: click.Context) -> Any:
    from workbench.ledger import Ledger

    led = Ledger(ctx.obj)
    ctx.call_on_close(led.close)
    return led


@ledger.command("list")
@click.option("--campaign", default=None, help="Only this campaign's attempts.")
@click.pass_context
def list_(ctx: click.Context, campaign: str | None) -> None:
    """One line per attempt, oldest first."""
    led = _opened(ctx)
    frame = led.attempts(campaign)
    if frame.empty:
        known = ", ".join(led.campaigns()["name"]) or "none"
        click.echo(f"no attempts{f' in campaign {campaign!r}' if campaign else ''} (campaigns: {known})")
        return
    rows = [
        (a["id"][:8], a["campaign"], a["host"], a["label"], a["cache"] or "", _ms(a["median_s"]),
         _pct(a["spread_pct"]), _int(a["n"]), _speedup(a["speedup"]), a["verdict"])
        for a in frame.to_dict("records")
    ]
    _echo_table(("id", "campaign", "host", "change", "cache", "median", "spread", "n", "speedup", "verdict"), rows)


@ledger.command("show")
@click.argument("attempt_id")
@click.pass_context
def show(ctx: click.Context, attempt_id: str) -> None:
    """An attempt (unique id prefix of ≥ 6 characters is enough) and its runs."""
    led = _opened(ctx)
    attempt = led.attempt(attempt_id)
    width = max(len(k) for k in attempt)
    for key, value in attempt.items():
        if key not in ("environment", "device_info") or not value:
            click.echo(f"{key:<{width}}  {value}")
    for key in ("device_info", "environment"):
        for sub, value in (attempt[key] or {}).items():
            click.echo(f"{key}.{sub}: {value}")
    runs = led.runs(attempt["id"])
    click.echo(f"\nruns ({len(runs)}):")
    rows = [
        (_int(r["position"]), _int(r["pid"]), _ms(r["load_s"]), _ms(r["wall_s"]), _frac(r["resident_before"]),
         r["cache_state"], r["verified"], ", ".join(r["engaged"]), (r["error"] or "")[:80])
        for r in runs.to_dict("records")
    ]
    _echo_table(("pos", "pid", "load", "wall", "resident", "cache", "verified", "engaged", "error"), rows)


@ledger.command("verdict")
@click.argument("attempt_id")
@click.argument("verdict", type=click.Choice(USER_VERDICTS))
@click.option("--note", default="", help="Why (kept in the attempt's notes and verdict history).")
@click.pass_context
def verdict(ctx: click.Context, attempt_id: str, verdict: str, note: str) -> None:
    """Record a person's verdict on an attempt."""
    full = _opened(ctx).set_verdict(attempt_id, verdict, note)
    click.echo(f"{full[:8]}: {verdict}")


@ledger.command("export")
@click.option("--csv", "csv_path", type=click.Path(), default=None,
              help="Directory (attempts.csv, runs.csv) or a .csv path (+ <stem>_runs.csv).")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False), default=None, help="Markdown file.")
@click.option("--campaign", default=None, help="Only this campaign.")
@click.pass_context
def export(ctx: click.Context, csv_path: str | None, md_path: str | None, campaign: str | None) -> None:
    """Write CSV and/or a PR-ready Markdown table."""
    from workbench.ledger import export_csv, export_markdown

    led = _opened(ctx)
    if not csv_path and not md_path:
        raise LedgerError(led.path, "export needs --csv PATH and/or --markdown PATH")
    written = export_csv(led, csv_path, campaign) if csv_path else []
    if md_path:
        written.append(export_markdown(led, md_path, campaign))
    for path in written:
        click.echo(f"wrote {path}")


@ledger.command("merge")
@click.argument("other", type=click.Path(dir_okay=False))
@click.pass_context
def merge(ctx: click.Context, other: str) -> None:
    """Import another machine's ledger (idempotent: merging twice adds nothing)."""
    counts = _opened(ctx).merge(other)
    click.echo(", ".join(f"{table}: +{count}" for table, count in counts.items()))


def _echo_table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    cells = [tuple(header)] + [tuple("" if c is None else str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _ms(seconds: Any) -> str:
    return "—" if _missing(seconds) else f"{seconds * 1000:.1f} ms"


def _pct(value: Any) -> str:
    return "—" if _missing(value) else f"{value:.1f} %"


def _frac(value: Any) -> str:
    return "—" if _missing(value) else f"{value:.0%}"


def _int(value: Any) -> str:
    return "—" if _missing(value) else str(int(value))


def _speedup(value: Any) -> str:
    return "—" if _missing(value) else f"{value:.2f}×"
