"""``workbench strategies``: every registered load strategy, its kind, its parameters and whether it runs here."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import click


def describe_strategy(name: str) -> dict[str, Any]:
    """Name, kind (``strategy``, or ``peer`` for a reference: a stock library's loader), summary,
    parameters (name, type, default) and availability of one registered strategy."""
    from workbench.strategies import STRATEGIES, strategy_kind

    entry, kind = STRATEGIES.entries[name], strategy_kind(name)
    try:
        cls = STRATEGIES.get(name)
    except ImportError as exc:  # a strategy module that cannot be imported here
        return {"name": name, "kind": kind, "summary": "", "params": [], "available": False,
                "reason": f"module missing: {exc}", "hint": entry.hint, "target": entry.target}
    avail = cls.available()
    params = [{"name": f.name, "type": str(f.type), "default": f.default}
              for f in dataclasses.fields(cls.Params)]
    return {"name": name, "kind": kind, "summary": cls.summary, "params": params, "available": bool(avail),
            "reason": avail.reason, "hint": entry.hint, "target": entry.target}


def describe_strategies() -> list[dict[str, Any]]:
    """:func:`describe_strategy` for every registered name, in registry order."""
    from workbench.strategies import STRATEGIES

    return [describe_strategy(name) for name in STRATEGIES]


def _human(info: dict[str, Any], width: int) -> list[str]:
    """A strategy in three lines, its details starting in column ``width + 1`` (the longest name); the
    first line starts with its kind (``strategy``, or ``peer`` for a reference library's loader)."""
    state = "available" if info["available"] else "UNAVAILABLE"
    reason = f" — {info['reason']}" if info["reason"] else ""
    kind = info.get("kind", "strategy")
    lines = [f"{info['name']:<{width}} {kind:<8} {info['summary']}", f"{'':<{width}} {state}{reason}"]
    if info["params"]:
        shown = ", ".join(f"{p['name']}={p['default']} ({p['type']})" for p in info["params"])
        lines.append(f"{'':<{width}} params: {shown}")
    return lines


@click.command("strategies")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def strategies(as_json: bool) -> None:
    """List load strategies (kind: strategy, or peer for a reference library's loader), their
    parameters with defaults, and availability."""
    infos = describe_strategies()
    if as_json:
        click.echo(json.dumps(infos, indent=2))
        return
    width = max(len(info["name"]) for info in infos)
    click.echo(f"{'name':<{width}} {'kind':<8} summary")
    for info in infos:
        click.echo("\n".join(_human(info, width)))
