"""The cells of ``workbench ledger list`` and ``show``: each value of a ledger frame as one printable
terminal cell, a missing one (None, or pandas' NaN in a column where other rows hold a value) as ``—``
or empty — never read as the type the other rows have."""
from __future__ import annotations

from typing import Any

import click

from workbench.records import format_effect, model_display_name
from workbench.records.baseline_match import with_across
from workbench.output.untrusted import for_terminal


def records(frame: Any) -> list[dict[str, Any]]:
    """The rows of a ledger frame with every missing value None: pandas fills a row's gap with NaN when
    the column holds numbers elsewhere (a failed run's error beside successful runs, its engaged facts,
    a run's load time), and a cell must not take NaN for a string or a list."""
    return [{key: None if _missing(value) else value for key, value in row.items()}
            for row in frame.to_dict("records")]


def echo_table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    cells = [tuple(header)] + [tuple("" if c is None else for_terminal(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def short(text: str, width: int = 60) -> str:
    """A long cell cut for the terminal (``ledger export --csv`` keeps it whole)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def cache_of(run: dict[str, Any]) -> str:
    """The state a run asked for, and plainly whether it got it (never the asked state alone)."""
    if run["cache_reached"] is False and run["cache_state"] in ("cold", "warm"):
        return f"{run['cache_state']} NOT reached"
    return run["cache_state"] or ""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def num(value: Any) -> Any:
    return None if _missing(value) else value


def effect(a: dict[str, Any]) -> str:
    if a.get("auto_verdict") == "baseline":
        return "baseline"
    return with_across(format_effect(num(a.get("speedup")), num(a.get("ci_low")), num(a.get("ci_high"))), a,
                       for_terminal)  # the hosts and models named in an ACROSS caveat come from the ledger


def model_name(path: Any) -> str:
    """The model as tables name it (``Llama-3-8B``, ``org/name@rev``), not its file's name."""
    return "—" if _missing(path) or not path else model_display_name(str(path))


def ms(seconds: Any) -> str:
    return "—" if _missing(seconds) else f"{seconds * 1000:.1f} ms"


def frac(value: Any) -> str:
    return "—" if _missing(value) else f"{value:.0%}"


def integer(value: Any) -> str:
    return "—" if _missing(value) else str(int(value))
