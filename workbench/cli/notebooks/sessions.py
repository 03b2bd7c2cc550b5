"""Notebook 04's actions and panel: a long session beside a single short one, boundary release off and on.

The second write-up's lesson as an experiment: its +20 % came from short, single-turn runs in fresh
processes, where a page leak has no time to build up; only the app's long session showed it. Here the
same cache runs both ways, and the per-turn records say which differences only time can show.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from workbench.cli.notebooks.actions import _best, _devices
from workbench.cli.notebooks.experts import moe_model, session_plan
from workbench.cli.notebooks.ui import Panel, ledger_path, results_html
from workbench.errors import WorkbenchError
from workbench.ledger.sessions import anon_gap_mib, token_fields
from workbench.records import plural
from workbench.output.untrusted import for_html

MiB = 1 << 20


def run_long_sessions(file: Path, plan: Sequence[tuple[str, Any]], device: str, store: Path, campaign: str,
                      hypothesis: str = "", say: Callable[[str], None] = lambda _m: None) -> list[Any]:
    """Each planned session in its own worker process, recorded in the ledger; the SessionResults."""
    from workbench.measure.session.runner import measure_session
    from workbench.measure.run.model import model_name  # a set's directory name, a file's stem

    results = []
    for label, config in plan:
        def on_turn(record: Any, label: str = label, turns: int = config.turns) -> None:
            say(f"{label}: turn {record.turn + 1}/{turns}, {record.unreleased_pages} unreleased pages")
        result = measure_session(str(file), config, device=device, ledger=store, campaign=campaign,
                                 hypothesis=hypothesis, label=f"{label} · {model_name(str(file))}", on_turn=on_turn)
        if result.error:
            raise WorkbenchError(f"{label}: {result.error}")
        results.append(result)
    return results


def sessions_frame(turns: Any, attempts: Any) -> Any:
    """One row per session: how it started and how it ended, the leak indicators side by side."""
    import pandas as pd

    rows = []
    labels = dict(zip(attempts["id"], attempts["label"]))
    for attempt_id, t in turns.groupby("attempt_id", sort=False):
        t = t.sort_values("turn")
        gap = anon_gap_mib(t)  # less the pages handed back with MADV_FREE the kernel had not taken yet
        rows.append({
            "session": labels.get(attempt_id, attempt_id).split(" · ")[0], "turns": len(t),
            "evictions": int(t["evictions"].sum()), "unreleased_first": int(t["unreleased_pages"].iloc[0]),
            "unreleased_last": int(t["unreleased_pages"].iloc[-1]), "anon−accounted first MiB": round(gap.iloc[0], 2),
            "anon−accounted last MiB": round(gap.iloc[-1], 2), "major faults": int(t["majflt"].sum()),
            "tok/s median": round(float(t["tokens_per_s"].median()), 1),
            **_token_columns(token_fields(t["extra"]) if "extra" in t else {"token_n": 0}),
        })
    return pd.DataFrame(rows)


def _token_columns(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Per-token p50 and p99 (ms) and the tokens they rest on; empty cells for turns recorded before."""
    n = fields["token_n"]
    return {"token p50 ms": round(fields["token_p50_ms"], 2) if n else None,
            "token p99 ms": round(fields["token_p99_ms"], 2) if n else None, "tokens (p99 rests on)": n}


def long_session_outputs(store: Path, campaign: str, ids: Sequence[str]) -> list[Any]:
    """The side-by-side table, the end-of-session bars, and the per-turn figures of the long sessions."""
    from IPython.display import HTML

    from workbench.ledger import Ledger
    from workbench.ledger.figures.experts import session_ends, session_figures

    with Ledger(store) as ledger:
        attempts = ledger.attempts(campaign)
        turns = ledger.turns(campaign=campaign)
    attempts = attempts[attempts["id"].isin(ids)]
    turns = turns[turns["attempt_id"].isin(ids)]
    summary = sessions_frame(turns, attempts)
    long_ids = [i for i, label in zip(attempts["id"], attempts["label"]) if str(label).startswith("long")]
    figures = session_figures(turns[turns["attempt_id"].isin(long_ids)], attempts)
    note = HTML(f"<p>{plural(len(ids), 'session')} recorded in <code>{for_html(store)}</code>, campaign "
                f"<code>{for_html(campaign)}</code> "
                "(per turn: <code>workbench ledger show ID</code>).</p>")
    return [note, results_html(summary, "wb-sessions"), session_ends(summary), *figures.values()]


def long_session_panel(*, file: str, size: str, experts: int, turns: int, tokens: int, short_tokens: int,
                       cache_mib: float, experts_per_token: int, placement: str, device: str, campaign: str,
                       hypothesis: str = "", ledger: str = "", ab: Sequence[str] = (), rounds: int = 0,
                       lanes: int = 1, overlap: bool = False, compute: str = "none",
                       memory_limit_mib: float = 0.0) -> Panel:
    """The panel of notebook 04: the model, the session's shape, the cache budget, placement, device, and
    the A/B (``ab`` arms over ``rounds`` rounds, with lanes, overlap, compute and a memory limit)."""
    import ipywidgets as w

    controls = {
        "file": w.Text(value=file, description="file", placeholder="(synthetic alignment-64 MoE, made if missing)",
                       layout=w.Layout(width="70%")),
        "size": w.Text(value=size, description="size"),
        "experts": w.BoundedIntText(value=experts, min=1, max=1024, description="experts"),
        "turns": w.BoundedIntText(value=turns, min=1, max=10_000, description="turns"),
        "tokens": w.BoundedIntText(value=tokens, min=1, max=100_000, description="tokens/turn"),
        "short_tokens": w.BoundedIntText(value=short_tokens, min=1, max=100_000, description="single-shot tokens",
                                         style={"description_width": "initial"}),
        "cache_mib": w.BoundedFloatText(value=cache_mib, min=0.01, max=1 << 20, description="cache MiB"),
        "experts_per_token": w.BoundedIntText(value=experts_per_token, min=1, max=1024, description="k"),
        "placement": w.Dropdown(options=["inplace", "bounce", "aligned"], value=placement, description="placement"),
        "device": w.Dropdown(options=_devices(device), value=device or _best(), description="device"),
        "ab": w.Textarea(value="\n".join(ab), description="A/B arms", placeholder="one --ab per line"),
        "rounds": w.BoundedIntText(value=rounds, min=0, max=100, description="A/B rounds"),
        "lanes": w.BoundedIntText(value=lanes, min=1, max=64, description="lanes"),
        "overlap": w.Checkbox(value=overlap, description="overlap"),
        "compute": w.Text(value=compute, description="compute"),
        "memory_limit_mib": w.BoundedFloatText(value=memory_limit_mib, min=0, max=1 << 24, description="mem MiB"),
        "campaign": w.Text(value=campaign, description="campaign"),
        "hypothesis": w.Text(value=hypothesis, description="hypothesis", layout=w.Layout(width="70%")),
    }
    store = ledger_path(ledger)

    def action(v: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        path = moe_model(v["file"], 64, v["size"], v["experts"])
        plan = session_plan(v["turns"], v["tokens"], v["short_tokens"], v["cache_mib"], v["experts_per_token"],
                            v["placement"])
        results = run_long_sessions(path, plan, v["device"], store, v["campaign"], v["hypothesis"], say)
        out = long_session_outputs(store, v["campaign"], [r.attempt_id for r in results])
        specs = [line.strip() for line in str(v["ab"]).splitlines() if line.strip()]
        if specs and v["rounds"]:
            out += _ab(path, plan[-1][1], specs, v, store, say)
        return out
    return Panel("Long session: release off vs on, single-shot vs long", controls, action)


def _ab(path: Path, long: Any, specs: Sequence[str], v: Mapping[str, Any], store: Path,
        say: Callable[[str], None]) -> list[Any]:
    """The A/B over the long session's shape with the panel's lanes, overlap, compute and memory limit."""
    import dataclasses

    from workbench.cli.notebooks.ab import ab_outputs, run_ab

    base = dataclasses.replace(long, lanes=v["lanes"], overlap=v["overlap"], compute=v["compute"],
                               memory_limit_mib=v["memory_limit_mib"] or None)
    result = run_ab(path, base, specs, v["rounds"], v["device"], store, v["campaign"], v["hypothesis"],
                    cache="cold" if v["memory_limit_mib"] else "asis", say=say)
    return ab_outputs(result, ["tok/s", "unreleased pages", "major faults/token", "residual ms/token"])
