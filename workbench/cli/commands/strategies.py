"""``workbench strategies``: every registered load strategy, its kind, its parameters and whether it runs here."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import click


def describe_strategy(name: str, backend: str = "host") -> dict[str, Any]:
    """Name, kind (``strategy``, or ``peer`` for a reference: a stock library's loader), summary,
    parameters (name, type, default) and availability on ``backend`` of one registered strategy.

    Availability comes from the installed distributions (``Strategy.installed``): no peer library
    (nor torch) is imported, so the list answers at once; a GPU-only peer is unavailable on a host
    backend."""
    from workbench.registry import Availability
    from workbench.strategies import STRATEGIES, strategy_kind

    entry, kind = STRATEGIES.entries[name], strategy_kind(name)
    try:
        cls = STRATEGIES.get(name)
    except ImportError as exc:  # a strategy module that cannot be imported here
        return {"name": name, "kind": kind, "summary": "", "params": [], "available": False,
                "reason": f"module missing: {exc}", "hint": entry.hint, "target": entry.target}
    avail = cls.installed()
    if avail and getattr(cls, "gpu_only", False) and backend.startswith("host"):
        avail = Availability(False, f"loads to CUDA devices only; the {backend} backend has none (--device cuda)")
    params = [{"name": f.name, "type": str(f.type), "default": f.default}
              for f in dataclasses.fields(cls.Params)]
    return {"name": name, "kind": kind, "summary": cls.summary, "params": params, "available": bool(avail),
            "reason": avail.reason, "hint": entry.hint, "target": entry.target}


def describe_strategies(backend: str = "host") -> list[dict[str, Any]]:
    """:func:`describe_strategy` for every registered name, in registry order."""
    from workbench.strategies import STRATEGIES

    return [describe_strategy(name, backend) for name in STRATEGIES]


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


def describe_ranked() -> list[dict[str, Any]]:
    """Every ranked strategy (how a checkpoint's bytes reach several ranks: ``run``/``compare --ranks N``),
    described as :func:`describe_strategy` describes a single-process one, kind ``ranked``."""
    from workbench.strategies.ranked import RANKED

    out = []
    for name in RANKED:
        entry = RANKED.entries[name]
        try:
            cls = RANKED.get(name)
        except ImportError as exc:
            out.append({"name": name, "kind": "ranked", "summary": "", "params": [], "available": False,
                        "reason": f"module missing: {exc}", "hint": entry.hint, "target": entry.target})
            continue
        avail = cls.available()
        params = [{"name": f.name, "type": str(f.type), "default": f.default}
                  for f in dataclasses.fields(cls.Params)]
        out.append({"name": name, "kind": "ranked", "summary": cls.summary, "params": params,
                    "available": bool(avail), "reason": avail.reason, "hint": entry.hint, "target": entry.target})
    return out


@click.command("strategies")
@click.option("--device", default="host", show_default=True,
              help="The backend availability is for (a GPU-only peer is unavailable on host).")
@click.option("--ranked", is_flag=True,
              help="List the ranked strategies instead: how the bytes reach several ranks (run/compare --ranks N).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def strategies(device: str, ranked: bool, as_json: bool) -> None:
    """List load strategies (kind: strategy, or peer for a reference library's loader), their
    parameters with defaults, and availability on a backend (from the installed packages); with
    --ranked, the strategies of a load across ranks (kind: ranked)."""
    infos = describe_ranked() if ranked else describe_strategies(device.partition(":")[0])
    if as_json:
        click.echo(json.dumps(infos, indent=2))
        return
    width = max(len(info["name"]) for info in infos)
    click.echo(f"{'name':<{width}} {'kind':<8} summary")
    for info in infos:
        click.echo("\n".join(_human(info, width)))
