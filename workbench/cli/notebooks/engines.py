"""Notebook 06's action and panel: an engine A/B — two (or more) engine commands timed interleaved to
their ready line, their own phase lines stacked, the verdict with its interval, and the exports.

The work is in plain functions (``expand_command``, ``run_engine_ab``, ``show_engine_ab``) so tests
drive it without a kernel; :func:`engine_ab_panel` wraps them in the shared
:class:`~workbench.cli.notebooks.ui.Panel`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from workbench.cli.notebooks.ui import Panel, ledger_path, results_html
from workbench.errors import WorkbenchError
from workbench.measure.run.effect import DEFAULT_MIN_EFFECT
from workbench.measure.run.order import DEFAULT_ORDER, ORDERS
from workbench.records import plural
from workbench.output.untrusted import for_html

DEFAULT_PHASE = r"phase (?P<name>\w+): (?P<ms>[0-9.]+) ms"
DEFAULT_MARKER = "engine ready"
# The demo A/B: one engine, two loaders (a heap read per tensor against touching a live mapping).
DEMO_COMMANDS = ("{python} {demo_engine} {file} --read heap", "{python} {demo_engine} {file} --read mmap")


def demo_engine_path() -> Path:
    """The stand-alone demo engine shipped with the package (``workbench/cli/data/demo_engine.py``)."""
    return Path(__file__).resolve().parents[1] / "data" / "demo_engine.py"


def expand_command(text: str, file: str | os.PathLike[str]) -> str:
    """``{python}``, ``{file}`` and ``{demo_engine}`` in a command line replaced (quoted) by this
    kernel's interpreter, the model file and the demo engine; no other braces are touched."""
    import shlex

    values = {"{python}": sys.executable, "{file}": str(file), "{demo_engine}": str(demo_engine_path())}
    for token, value in values.items():
        text = text.replace(token, shlex.quote(value))
    return text


def run_engine_ab(commands: Sequence[str], file: str, *, labels: Sequence[str] = (), marker: str = DEFAULT_MARKER,
                  start_marker: str = "", phases: Sequence[str] = (DEFAULT_PHASE,), binaries: Sequence[str] = (),
                  shell: bool = False, caches: Sequence[str] = ("warm",), runs: int = 5, device: str = "",
                  ledger: str | os.PathLike[str] = "", campaign: str = "notebook-engine-ab",
                  hypothesis: str = "", say: Callable[[str], None] = lambda _m: None,
                  order: str = DEFAULT_ORDER, min_effect: float = DEFAULT_MIN_EFFECT) -> list[Any]:
    """Measure the commands interleaved, once per cache state; returns the AttemptResults."""
    from workbench.cli.notebooks.actions import resolve_file
    from workbench.measure.engine.external import EngineCommand, measure_engines

    commands = [c for c in commands if c.strip()] or list(DEMO_COMMANDS)
    if labels and len(labels) != len(commands):
        raise WorkbenchError(f"{len(labels)} labels for {len(commands)} commands")
    if binaries and len(binaries) != len(commands):
        raise WorkbenchError(f"{len(binaries)} binaries for {len(commands)} commands ('' resolves one)")
    if not caches:
        raise WorkbenchError("no cache state selected")
    path = resolve_file(file)
    engines = [EngineCommand(expand_command(c, path), marker, start_marker=start_marker or None,
                             phases=tuple(p for p in phases if p.strip()), shell=shell,
                             binary=(binaries[i] or None) if binaries else None,
                             label=labels[i] if labels else "")
               for i, c in enumerate(commands)]
    device = device or _best_device()
    results: list[Any] = []
    for cache in caches:
        def progress(done: int, total: int, config: Any, run: Any, cache: str = cache) -> None:
            took = "failed" if run.error else f"{run.load_s * 1000:.1f} ms"
            say(f"{cache}: run {done}/{total} — {config.display}: {took}")
        results += measure_engines(engines, str(path), runs=runs, cache=cache, device=device,
                                   ledger=ledger_path(str(ledger) if ledger else None), campaign=campaign,
                                   hypothesis=hypothesis, progress=progress, order=order, min_effect=min_effect)
    return results


def verdict_lines(results: Sequence[Any]) -> list[str]:
    """``slow vs fast (warm): 0.42× [0.40–0.44] — slower (interval excludes 1 (independent runs))``, one
    per compared attempt, against the baseline measured with it."""
    labels = {r.attempt_id: r.label for r in results}
    lines = []
    for r in results:
        if r.verdict == "baseline" or r.baseline_id is None:
            continue
        why = "; ".join(filter(None, [r.verdict_reason, r.notes if r.verdict == "failed" else ""]))
        base = labels.get(r.baseline_id, r.baseline_id[:8])
        lines.append(f"{r.label} vs {base} ({r.cache}): {r.effect} — {r.verdict_text}" + (f" ({why})" if why else ""))
    return lines


def engine_table(results: Sequence[Any]) -> Any:
    """One row per attempt: the build, the cache state, n, median/min/max, spread, effect, verdict."""
    import pandas as pd

    from workbench.measure.run.tables import binary_label
    from workbench.records import format_spread

    rows = []
    for r in results:
        s = r.stats
        ms = (lambda v: None if v is None else round(v * 1000, 2))
        rows.append({
            "attempt": r.attempt_id[:8], "engine": r.label, "binary": binary_label(r) or "—", "cache": r.cache,
            "n": f"{s.n}" + (f" (+{s.n_failed} failed)" if s.n_failed else ""), "median ms": ms(s.median_s),
            "min ms": ms(s.min_s), "max ms": ms(s.max_s),
            "spread": format_spread(s.spread_pct, s.n, s.stable), "vs baseline [95 % CI]": r.effect,
            "verdict": r.verdict_text,
        })
    return pd.DataFrame(rows)


def show_engine_ab(store: Path, campaign: str, results: Sequence[Any], out_dir: str | None = None) -> list[Any]:
    """What notebook 06 shows: the verdicts, the attempts table, engine phases (table and stacked bars),
    medians with their range, and the campaign's exports written under ``out_dir``."""
    from IPython.display import HTML

    from workbench.ledger import Ledger
    from workbench.ledger.figures.campaign import median_with_range, phase_bars
    from workbench.ledger.report import report_dir, write_report
    from workbench.measure.run.tables import phases_table

    ids = [r.attempt_id for r in results]
    with Ledger(store) as ledger:
        attempts = ledger.attempts(campaign)
        attempts = attempts[attempts["id"].isin(ids)].reset_index(drop=True)
        runs = ledger.runs(campaign=campaign)
        runs = runs[runs["attempt_id"].isin(ids)]
        paths = write_report(ledger, campaign, Path(out_dir) if out_dir else report_dir(campaign))
    verdicts = "".join(f"<li>{for_html(line)}</li>" for line in verdict_lines(results))
    note = HTML(f'<div class="wb-verdict"><ul>{verdicts or "<li>one engine: no comparison</li>"}</ul>'
                f"<p>{plural(len(ids), 'attempt')} recorded in <code>{for_html(str(store))}</code>, campaign "
                f"<code>{for_html(campaign)}</code>.</p></div>")
    phases = phases_table(results)
    phase_text = HTML(f'<pre class="wb-phases">{for_html(phases)}</pre>') if phases else HTML(
        "<p><i>No phase line matched: give the engine's own phase pattern (groups name and ms or s).</i></p>")
    exports = HTML("<p>Exports: " + ", ".join(f"<code>{for_html(str(p))}</code>" for p in (
        paths.attempts_csv, paths.runs_csv, paths.markdown, paths.html)) + "</p>")
    return [note, results_html(engine_table(results)), phase_text, phase_bars(attempts, runs),
            median_with_range(attempts), exports]


def engine_ab_panel(*, commands: Sequence[str], labels: Sequence[str], marker: str, start_marker: str,
                    phases: Sequence[str], file: str, binaries: Sequence[str], shell: bool, caches: Sequence[str],
                    runs: int, device: str, campaign: str, hypothesis: str = "", ledger: str = "",
                    out_dir: str = "", order: str = DEFAULT_ORDER, min_effect: float = DEFAULT_MIN_EFFECT) -> Panel:
    """The panel of notebook 06: commands (one per line), markers, phase patterns, file, cache, runs,
    order and minimum effect."""
    import ipywidgets as w

    from workbench.records import CACHE_STATES

    wide = w.Layout(width="90%")
    lines = (lambda values: "\n".join(values))
    controls = {
        "commands": w.Textarea(value=lines(commands or DEMO_COMMANDS), description="commands", layout=wide,
                               rows=3, placeholder="one engine command per line; the first is the baseline"),
        "labels": w.Text(value=", ".join(labels), description="labels", placeholder="one per command"),
        "marker": w.Text(value=marker, description="end marker", layout=wide),
        "start_marker": w.Text(value=start_marker, description="start marker", placeholder="(spawn)", layout=wide),
        "phases": w.Textarea(value=lines(phases), description="phases", layout=wide, rows=2),
        "file": w.Text(value=file, description="file", placeholder="(demo dense model)", layout=wide),
        "binaries": w.Text(value=", ".join(binaries), description="binaries", placeholder="(from the commands)"),
        "shell": w.Checkbox(value=shell, description="through a shell"),
        "caches": w.SelectMultiple(options=CACHE_STATES, value=tuple(caches), description="cache", rows=3),
        "runs": w.BoundedIntText(value=runs, min=1, max=100, description="runs"),
        "device": w.Text(value=device, description="device", placeholder="(best available)"),
        "order": w.Dropdown(options=ORDERS, value=order, description="order"),
        "min_effect": w.BoundedFloatText(value=min_effect, min=0, max=0.99, step=0.01, description="min effect"),
        "campaign": w.Text(value=campaign, description="campaign"),
        "hypothesis": w.Text(value=hypothesis, description="hypothesis", layout=wide),
    }
    store = ledger_path(ledger)

    def action(v: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        results = run_engine_ab(
            v["commands"].splitlines(), v["file"], labels=_items(v["labels"]), marker=v["marker"],
            start_marker=v["start_marker"], phases=v["phases"].splitlines(), binaries=_items(v["binaries"], True),
            shell=v["shell"], caches=v["caches"], runs=v["runs"], device=v["device"], ledger=store,
            campaign=v["campaign"], hypothesis=v["hypothesis"], say=say, order=v["order"],
            min_effect=v["min_effect"])
        return show_engine_ab(store, v["campaign"], results, out_dir or None)
    return Panel("Engine A/B", controls, action)


def _items(text: str, keep_empty: bool = False) -> list[str]:
    """Comma-separated items, stripped; '' items kept only where they mean something (a binary)."""
    items = [t.strip() for t in str(text).split(",")]
    if keep_empty:
        return items if any(items) else []
    return [t for t in items if t]


def _best_device() -> str:
    from workbench.upload import best_device

    return best_device()
