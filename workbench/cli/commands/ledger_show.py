"""``workbench ledger show ID``: one attempt of any kind the workbench records (a run's or a compare's,
with failed runs or not, an external engine's, a session's or a session A/B cell's, one imported from
an unrecorded dump or merged from another machine), its runs or its turns."""
from __future__ import annotations

from typing import Any

import click

from workbench.cli.commands.ledger_cells import (
    cache_of, echo_table, effect, frac, integer, ms, records, short,
)
from workbench.output.untrusted import for_terminal


def show_attempt(led: Any, attempt_id: str) -> None:
    """Print the attempt (every value one printable line), then its runs or, for a session, its turns."""
    attempt = led.attempt(attempt_id)
    width = max(len(k) for k in attempt)
    for key, value in attempt.items():  # every value is untrusted text: one printable line each
        if key not in ("environment", "device_info") or not value:
            click.echo(f"{key:<{width}}  {for_terminal(value)}")
    click.echo(f"{'effect':<{width}}  {effect(attempt)}")
    for key in ("device_info", "environment"):
        for sub, value in (attempt[key] or {}).items():
            if sub == "settings" and isinstance(value, dict):  # the load-path settings, one a line
                for name, setting in value.items():
                    click.echo(f"{key}.settings.{for_terminal(name)}: {for_terminal(setting)}")
            else:
                click.echo(f"{key}.{for_terminal(sub)}: {for_terminal(value)}")
    if attempt.get("kind") == "session":
        _show_turns(led, attempt["id"])
        return
    runs = records(led.runs(attempt["id"]))
    click.echo(f"\nruns ({len(runs)}):")
    rows = [
        (integer(r["position"]), integer(r["pid"]), ms(r["load_s"]), ms(r["wall_s"]), frac(r["resident_before"]),
         cache_of(r), r["verified"], short(", ".join(r["engaged"] or ())), (r["error"] or "")[:80])
        for r in runs
    ]
    echo_table(("pos", "pid", "load", "wall", "resident", "cache", "verified", "engaged", "error"), rows)
    _show_files(runs)


def _show_files(runs: list[dict[str, Any]]) -> None:
    """A model of several files: each file's resident fraction before each run (the column above is
    the whole model's), so a shard the state missed is seen."""
    from workbench.errors import printable

    names = list(dict.fromkeys(n for r in runs for n in (r.get("resident_files") or {})))
    if len(names) < 2:
        return
    click.echo(f"\nresident before, per file ({len(names)} files; columns: run position):")
    echo_table(("file", *(integer(r["position"]) for r in runs)),
               [(printable(name), *(frac((r.get("resident_files") or {}).get(name)) for r in runs))
                for name in names])


def _show_turns(led: Any, attempt_id: str) -> None:
    """A long session's turns: what changes turn over turn is the point (a leak grows, a cost does not)."""
    turns = records(led.turns(attempt_id))
    click.echo(f"\nturns ({len(turns)}):")
    rows = [
        (integer(t["turn"]), integer(t["tokens"]), _rate(t["tokens_per_s"]), integer(t["hits"]),
         integer(t["misses"]), integer(t["evictions"]), integer(t["minflt"]), integer(t["majflt"]),
         integer(t["unreleased_pages"]), _mib(t["actual_anon_bytes"], t["accounted_bytes"]), ms(t["seconds"]))
        for t in turns
    ]
    echo_table(("turn", "tokens", "tok/s", "hits", "misses", "evictions", "minflt", "majflt", "unreleased",
                "anon-accounted MiB", "time"), rows)


def _rate(value: Any) -> str:
    return "—" if value is None else f"{value:.1f}"


def _mib(actual: Any, accounted: Any) -> str:
    return "—" if actual is None or accounted is None else f"{(actual - accounted) / 2**20:.1f}"
