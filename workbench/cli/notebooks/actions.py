"""Notebook 01's action and panel (a load sweep), and what the other notebooks share: the models, devices.

Each ``*_panel`` function turns a notebook's parameters into a :class:`~workbench.cli.notebooks.ui.Panel`;
the work itself is in plain functions (``expand_configs``, ``run_load_sweep`` …) so it is testable
without a kernel. Notebooks 02 and 05 are in :mod:`workbench.cli.notebooks.report`.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from workbench.settings import defaults
from workbench.errors import ParamError, WorkbenchError
from workbench.cli.notebooks.ui import Panel, ParamGrid, ledger_path, results_html
from workbench.measure.run.effect import DEFAULT_MIN_EFFECT
from workbench.measure.run.order import DEFAULT_ORDER, ORDERS
from workbench.records import plural
from workbench.output.untrusted import for_html

MAX_CONFIGS = 1_000  # configurations of one load sweep point (each measured runs × caches times, a process a run)
DEFAULT_MODEL = ("dense", "gguf", "32MiB")  # the demo's dense model: after `workbench demo` it is there


def ensure_model(path: str | os.PathLike[str], *, layout: str, format: str, size: int | str,
                 **synth: Any) -> Path:
    """``path`` if it already holds a readable model; otherwise write a synthetic one there (atomically);
    ``synth`` goes to ``write_synthetic`` (``alignment``, ``experts``, ``shards``: then ``path`` is the
    directory of the set, …). A rewrite asked by nobody replaces only files the workbench wrote itself
    (a truncated model from an interrupted run), never a ledger, a real model or a file of the user's,
    and never writes through a link (one line saying which file and why)."""
    from workbench.formats import open_index
    from workbench.formats.synth import parse_size, write_synthetic

    path = Path(path)
    if path.is_file() or (path.is_dir() and synth.get("shards", 1) > 1):
        try:
            open_index(path)
            return path
        except WorkbenchError:
            pass  # a broken model (or set): write it again, over nothing but the workbench's own files
    write_synthetic(path, format=format, layout=layout, size=parse_size(size), force=False, ours_only=True, **synth)
    return path


def model_path(layout: str, format: str, size: str, root: Path | None = None, shards: int = 1) -> Path:
    """Where the demo keeps its synthetic model of this layout, format and size: a file, or for
    ``shards`` > 1 the directory of the set (``demo-dense-32MiB-3shards/model-00001-of-00003.gguf``, …)."""
    models = root / "models" if root is not None else defaults.models_dir()
    return models / (f"demo-{layout}-{size}-{shards}shards" if shards > 1 else f"demo-{layout}-{size}.{format}")


def resolve_file(file: str) -> Path:
    """The model to measure: the given path — a file, or a directory, index file or any shard of a set
    (the runner's preflight checks every file) — or (empty) the demo's small dense model, made if missing."""
    if file:
        if not Path(file).exists():
            raise WorkbenchError(f"{file}: no such model file")
        return Path(file)
    layout, fmt, size = DEFAULT_MODEL
    return ensure_model(model_path(layout, fmt, size), layout=layout, format=fmt, size=size)


def count_configs(strategies: Sequence[str], params: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, int]]:
    """Each strategy with the number of its configurations (its parameter lists' product), its parameter
    names checked and the total capped at :data:`MAX_CONFIGS` — counted, none made (a product grows fast)."""
    from workbench.strategies import STRATEGIES

    if not strategies:
        raise WorkbenchError("no strategy selected")
    counts, total = [], 0
    for name in strategies:
        known = STRATEGIES.get(name).param_defaults()
        grid = dict(params.get(name) or {})
        for key in grid:
            if key not in known:
                raise ParamError(name, key, f"unknown parameter; known: {', '.join(known) or 'none'}")
        n = math.prod(len(v) if isinstance(v, (list, tuple)) else 1 for v in grid.values())
        total += n
        if total > MAX_CONFIGS:
            raise ParamError(name, "params", f"the strategies' parameter lists make {total:,}+ configurations: "
                                             f"more than the {MAX_CONFIGS:,} one load sweep may measure")
        counts.append((name, n))
    return counts


def expand_configs(file: str | os.PathLike[str], strategies: Sequence[str],
                   params: Mapping[str, Mapping[str, Any]], device: str) -> list[Any]:
    """Every strategy × its parameter grid (lists → cartesian product) as RunConfigs, in order."""
    from workbench.measure.run.model import model_name
    from workbench.records import RunConfig

    count_configs(strategies, params)  # before any is made
    model = model_name(str(file))  # the model in the label: a campaign over several models reads unambiguously
    configs = []
    for name in strategies:
        grid = dict(params.get(name) or {})
        lists = [v if isinstance(v, (list, tuple)) else [v] for v in grid.values()]
        for combo in itertools.product(*lists):
            config = RunConfig(str(file), name, dict(zip(grid, combo)), device)
            configs.append(dataclasses.replace(config, label=f"{config.display} · {model}"))
    return configs


def run_load_sweep(file: str, strategies: Sequence[str], params: Mapping[str, Any], caches: Sequence[str],
                   runs: int, device: str, ledger: str | os.PathLike[str], campaign: str,
                   hypothesis: str = "", say: Callable[[str], None] = lambda _m: None, *,
                   order: str = DEFAULT_ORDER, min_effect: float = DEFAULT_MIN_EFFECT) -> list[Any]:
    """Measure every config interleaved, once per cache state; returns the AttemptResults."""
    from workbench.measure.run.runner import measure
    from workbench.upload import best_device

    if not caches:
        raise WorkbenchError("no cache state selected")
    if len(set(caches)) != len(caches):
        raise WorkbenchError(f"a cache state is listed twice: {', '.join(caches)}")
    path = resolve_file(file)
    configs = expand_configs(path, strategies, params, device or best_device())
    results: list[Any] = []
    for cache in caches:
        def progress(done: int, total: int, config: Any, run: Any, cache: str = cache) -> None:
            took = "failed" if run.error else f"{run.load_s * 1000:.1f} ms"
            say(f"{cache}: run {done}/{total} — {config.display}: {took}")
        results += measure(configs, runs=runs, cache=cache, ledger=ledger, campaign=campaign,
                           hypothesis=hypothesis, progress=progress, order=order, min_effect=min_effect)
    return results


def attempts_table(attempts: Any) -> Any:
    """The readable columns of a ledger attempts frame: what a reader compares, the speedup with its
    95 % interval formatted as every table shows it (README "Measuring honestly")."""
    import pandas as pd

    from workbench.records import format_effect, format_spread
    from workbench.records.baseline_match import with_across

    rows = attempts.to_dict("records")
    return pd.DataFrame({
        "attempt": attempts["id"].str[:8], "change": attempts["label"], "cache": attempts["cache"],
        "n": attempts["n"], "median ms": (attempts["median_s"] * 1000).round(2),
        "min ms": (attempts["min_s"] * 1000).round(2), "max ms": (attempts["max_s"] * 1000).round(2),
        "spread": [format_spread(_value(a["spread_pct"]), _value(a["n"]), _value(a["stable"])) for a in rows],
        "GB/s": attempts["gbps"].round(3),
        "vs baseline [95 % CI]": ["baseline" if a["auto_verdict"] == "baseline" else
                                  with_across(format_effect(_value(a["speedup"]), _value(a["ci_low"]),
                                                            _value(a["ci_high"])), a)
                                  for a in rows],
        "verdict": attempts["verdict_text"],
    })


def _value(x: Any) -> Any:
    return None if x is None or (isinstance(x, float) and x != x) else x


def load_sweep_panel(*, file: str, strategies: Sequence[str], params: Mapping[str, Any],
                     caches: Sequence[str], runs: int, device: str, campaign: str, hypothesis: str = "",
                     ledger: str = "", order: str = DEFAULT_ORDER,
                     min_effect: float = DEFAULT_MIN_EFFECT) -> Panel:
    """The panel of notebook 01: file, strategies, their parameters, cache states, runs, device,
    order and minimum effect."""
    import ipywidgets as w

    from workbench.records import CACHE_STATES
    from workbench.strategies import STRATEGIES

    models = model_choices()
    pick = w.SelectMultiple(options=STRATEGIES.names(), value=tuple(strategies), description="strategies", rows=7)
    controls = {
        "file": w.Combobox(value=file, options=models, description="model", layout=w.Layout(width="70%"),
                           placeholder="(demo dense model) a file, a directory, an index json or a shard"),
        "strategies": pick,
        "params": ParamGrid(pick, params),
        "caches": w.SelectMultiple(options=CACHE_STATES, value=tuple(caches), description="cache", rows=3),
        "runs": w.BoundedIntText(value=runs, min=1, max=100, description="runs"),
        "device": w.Dropdown(options=_devices(device), value=device or _best(), description="device"),
        "order": w.Dropdown(options=ORDERS, value=order, description="order"),
        "min_effect": w.BoundedFloatText(value=min_effect, min=0, max=0.99, step=0.01, description="min effect"),
        "campaign": w.Text(value=campaign, description="campaign"),
        "hypothesis": w.Text(value=hypothesis, description="hypothesis", layout=w.Layout(width="70%")),
    }
    store = ledger_path(ledger)

    def action(v: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        results = run_load_sweep(v["file"], v["strategies"], v["params"], v["caches"], v["runs"], v["device"],
                                 store, v["campaign"], v["hypothesis"], say, order=v["order"],
                                 min_effect=v["min_effect"])
        return show_attempts(store, v["campaign"], [r.attempt_id for r in results])
    return Panel("Load-strategy sweep", controls, action)


def model_choices(root: Path | None = None) -> list[str]:
    """The models under the models directory a file picker offers: each model file, and each directory
    that holds a model of several files (a sharded set: the directory is the model, not its shards)."""
    from workbench.formats.resolve import resolve_model

    folder = root if root is not None else defaults.models_dir()
    found = []
    for path in sorted(folder.glob("*")) if folder.is_dir() else ():
        if path.is_file() and path.suffix in (".gguf", ".safetensors"):
            found.append(str(path))
        elif path.is_dir():
            try:
                resolve_model(path)
            except WorkbenchError:
                continue  # a directory with no model in it (or a bad set): nothing to offer
            found.append(str(path))
    return found


def show_attempts(store: Path, campaign: str, ids: Sequence[str]) -> list[Any]:
    """A results table and the campaign figures for these attempts, read back from the ledger."""
    from IPython.display import HTML

    from workbench.settings.defaults import host_id
    from workbench.ledger import Ledger
    from workbench.ledger.figures.campaign import campaign_figures

    with Ledger(store) as ledger:
        attempts = ledger.attempts(campaign)
        attempts = attempts[attempts["id"].isin(ids)].reset_index(drop=True)
        runs = ledger.runs(campaign=campaign)
        runs = runs[runs["attempt_id"].isin(ids)]
        ceilings = ledger.ceilings(host=host_id())
    figures = campaign_figures(attempts, runs, ceilings)
    note = HTML(f"<p>{plural(len(attempts), 'attempt')} recorded in <code>{for_html(store)}</code>, campaign "
                f"<code>{for_html(campaign)}</code>.</p>")
    return [note, results_html(attempts_table(attempts)), *per_file_residency(attempts, runs), *figures.values()]


def per_file_residency(attempts: Any, runs: Any) -> list[Any]:
    """A model of several files: a heading and one row per file (its resident fraction before the runs
    and after their loads, per cache state); nothing for a one-file model."""
    from IPython.display import HTML

    from workbench.ledger.figures.files import file_residency_table

    table = file_residency_table(attempts, runs)
    if table is None:
        return []
    return [HTML(f"<h4>Resident per file ({plural(len(table), 'file')}; min–max over the runs)</h4>"),
            results_html(table, "wb-resident-files")]


def _best() -> str:
    from workbench.upload import best_device

    return best_device()


def _devices(wanted: str) -> list[str]:
    from workbench.upload import DEVICES, device_availability

    names = [n for n in DEVICES.names() if device_availability(n)]
    return names + ([wanted] if wanted and wanted not in names else [])
