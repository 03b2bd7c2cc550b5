"""The MoE notebooks' actions and panels: expert slices (03) and long sessions (04).

As in :mod:`workbench.cli.notebooks.actions`, the measuring is in plain functions
(``run_expert_slices``, ``run_long_sessions``, ``placement_frame`` …) and the ``*_panel`` functions
only put ipywidgets controls in front of them.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from workbench.settings import defaults
from workbench.cli.notebooks.actions import _best, _devices, ensure_model
from workbench.cli.notebooks.ui import Panel, ledger_path, results_html
from workbench.errors import WorkbenchError
from workbench.records import plural
from workbench.output.untrusted import for_html

# (strategy, params, what it stands for): the first is the baseline of each measured group
SLICE_METHODS = (
    ("pread", {"granularity": "expert"}, "per-expert pread"),
    ("experts", {"upload": "pageable"}, "experts: one copy per blob"),
    ("odirect", {"mode": "bounce"}, "odirect bounce"),
    ("odirect", {"mode": "inplace"}, "odirect in place"),
)


def moe_model(file: str, alignment: int, size: str, experts: int) -> Path:
    """``file`` when given (a file, or a directory / index file / shard of a set); else the synthetic MoE
    GGUF of this alignment under data/models (made if missing)."""
    if file:
        if not Path(file).exists():
            raise WorkbenchError(f"{file}: no such model file")
        return Path(file)
    path = defaults.models_dir() / f"moe-a{alignment}-e{experts}-{size}.gguf"
    return ensure_model(path, layout="moe", format="gguf", size=size, alignment=alignment, experts=experts)


def placement_frame(path: str | os.PathLike[str]) -> Any:
    """(one row per expert blob: where it sits against the page and whether in-place placement engages,
    the model's ``odirect-zero-copy ON|PARTIAL|INERT — n/m`` line)."""
    import pandas as pd

    from workbench.expert import plan_placements
    from workbench.formats import open_index

    index = open_index(path)
    plans, report = plan_placements(index.blobs)
    return pd.DataFrame({
        "layer": [b.layer for b in index.blobs], "blob": [b.name for b in index.blobs],
        "experts": [b.n_experts for b in index.blobs], "stride pages": [b.stride / 4096 for b in index.blobs],
        "offset % 4096": [p.remainder for p in plans], "placement": ["ON" if p.placed else "INERT" for p in plans],
        "reason": [p.reason for p in plans],
    }), str(report)


def slice_configs(path: Path, alignment: int, device: str) -> list[Any]:
    from workbench.records import RunConfig

    return [RunConfig(str(path), name, dict(params), device, label=f"{what} · a{alignment}")
            for name, params, what in SLICE_METHODS]


def run_expert_slices(files: Mapping[int, Path], caches: Sequence[str], runs: int, device: str, store: Path,
                      campaign: str, hypothesis: str = "", say: Callable[[str], None] = lambda _m: None) -> list[Any]:
    """Every method on every model, interleaved per model and cache state; returns the AttemptResults."""
    from workbench.measure.run.runner import measure

    results: list[Any] = []
    for alignment, path in files.items():
        for cache in caches:
            def progress(done: int, total: int, config: Any, run: Any, cache: str = cache) -> None:
                took = "failed" if run.error else f"{run.load_s * 1000:.1f} ms"
                say(f"{cache}: run {done}/{total} — {config.label}: {took}")
            results += measure(slice_configs(path, alignment, device), runs=runs, cache=cache, ledger=store,
                               campaign=campaign, hypothesis=hypothesis, progress=progress)
    return results


def expert_slices_outputs(store: Path, campaign: str, ids: Sequence[str], files: Mapping[int, Path]) -> list[Any]:
    """The attempts with their facts, the two figures, and the per-buffer placement table of each model."""
    from IPython.display import HTML

    from workbench.ledger import Ledger
    from workbench.ledger.figures.experts import run_counters, shift_copy_bars, slices_median

    with Ledger(store) as ledger:
        attempts = ledger.attempts(campaign)
        runs = ledger.runs(campaign=campaign)
    attempts = attempts[attempts["id"].isin(ids)].reset_index(drop=True)
    runs = runs[runs["attempt_id"].isin(ids)]
    attempts["method"] = attempts["label"].str.split(" · ").str[0]
    attempts["alignment"] = attempts["label"].str.split(" · a").str[-1]
    counters = run_counters(runs)
    facts = runs.groupby("attempt_id")["engaged"].first()
    table = attempts.assign(
        **{"median ms": (_numbers(attempts["median_s"]) * 1000).round(2),
           "spread %": _numbers(attempts["spread_pct"]).round(1),
           "vs per-expert": [_effect(a) for a in attempts.to_dict("records")],
           "engaged": [" · ".join(facts.get(i, ())) for i in attempts["id"]],
           "verdict": attempts["verdict_text"]}
    )[["label", "cache", "n", "median ms", "spread %", "vs per-expert", "verdict", "engaged"]]
    out = [HTML(f"<p>{plural(len(attempts), 'attempt')} recorded in <code>{for_html(store)}</code>, campaign "
                f"<code>{for_html(campaign)}</code>.</p>"), results_html(table), slices_median(attempts),
           shift_copy_bars(attempts, counters)]
    for alignment, path in files.items():
        frame, report = placement_frame(path)
        out += [HTML(f"<h4>Alignment {for_html(alignment)}: {for_html(report)}</h4>"), results_html(frame, "wb-placement")]
    return out


def _numbers(column: Any) -> Any:
    """A ledger column as floats (None, as one run leaves a spread, becomes NaN)."""
    import pandas as pd

    return pd.to_numeric(column, errors="coerce")


def _effect(a: Mapping[str, Any]) -> str:
    """``baseline``, or the speedup over it with its interval (``1.14× [1.05–1.22]``)."""
    from workbench.records import format_effect

    if a.get("auto_verdict") == "baseline":
        return "baseline"
    return format_effect(*(None if v is None or v != v else v for v in (a.get("speedup"), a.get("ci_low"),
                                                                         a.get("ci_high"))))


def expert_slices_panel(*, file_64: str, file_32: str, size: str, experts: int, caches: Sequence[str], runs: int,
                        device: str, campaign: str, hypothesis: str = "", ledger: str = "", session_rounds: int = 0,
                        session_turns: int = 6, session_tokens: int = 8, lanes: int = 4, overlap: bool = True,
                        compute: str = "sleep:4") -> Panel:
    """The panel of notebook 03: the two models (alignment 64 and 32), cache states, runs, device, and
    the placement A/B as sessions (bounce vs in place, ``session_rounds`` rounds; 0: none)."""
    import ipywidgets as w

    from workbench.records import CACHE_STATES

    controls = {
        "file_64": w.Text(value=file_64, description="file a64", placeholder="(synthetic, made if missing)",
                          layout=w.Layout(width="70%")),
        "file_32": w.Text(value=file_32, description="file a32", placeholder="(synthetic, made if missing)",
                          layout=w.Layout(width="70%")),
        "size": w.Text(value=size, description="size"),
        "experts": w.BoundedIntText(value=experts, min=1, max=1024, description="experts"),
        "caches": w.SelectMultiple(options=CACHE_STATES, value=tuple(caches), description="cache", rows=3),
        "runs": w.BoundedIntText(value=runs, min=1, max=100, description="runs"),
        "device": w.Dropdown(options=_devices(device), value=device or _best(), description="device"),
        "session_rounds": w.BoundedIntText(value=session_rounds, min=0, max=100, description="A/B rounds"),
        "session_turns": w.BoundedIntText(value=session_turns, min=1, max=10_000, description="A/B turns"),
        "session_tokens": w.BoundedIntText(value=session_tokens, min=1, max=10_000, description="tokens/turn"),
        "lanes": w.BoundedIntText(value=lanes, min=1, max=64, description="lanes"),
        "overlap": w.Checkbox(value=overlap, description="overlap"),
        "compute": w.Text(value=compute, description="compute"),
        "campaign": w.Text(value=campaign, description="campaign"),
        "hypothesis": w.Text(value=hypothesis, description="hypothesis", layout=w.Layout(width="70%")),
    }
    store = ledger_path(ledger)

    def action(v: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        say("preparing the alignment-64 and alignment-32 models …")
        files = {64: moe_model(v["file_64"], 64, v["size"], v["experts"]),
                 32: moe_model(v["file_32"], 32, v["size"], v["experts"])}
        results = run_expert_slices(files, v["caches"], v["runs"], v["device"], store, v["campaign"],
                                    v["hypothesis"], say)
        out = expert_slices_outputs(store, v["campaign"], [r.attempt_id for r in results], files)
        if v["session_rounds"]:
            out += placement_ab(files[64], v, store, say)
        return out
    return Panel("Expert slices: per-expert vs blob, bounce vs in place", controls, action)


def placement_ab(path: Path, v: Mapping[str, Any], store: Path, say: Callable[[str], None]) -> list[Any]:
    """Bounce vs in place as a decode session A/B: shift bytes per token, tok/s, residual, staged GB/s."""
    from workbench.cli.notebooks.ab import ab_outputs, run_ab
    from workbench.expert.session import SessionConfig

    base = SessionConfig(turns=v["session_turns"], tokens=v["session_tokens"], lanes=v["lanes"],
                         overlap=v["overlap"], compute=v["compute"])
    result = run_ab(path, base, ["placement=bounce", "placement=inplace"], v["session_rounds"], v["device"], store,
                    v["campaign"], v["hypothesis"], say=say)
    return ab_outputs(result, ["shift MiB/token", "tok/s", "residual ms/token", "staged GB/s"])


def session_plan(turns: int, tokens: int, short_tokens: int, cache_mib: float, experts_per_token: int,
                 placement: str) -> list[tuple[str, Any]]:
    """(label, SessionConfig): a single short turn and a long session, each with release off and on."""
    from workbench.expert.session import SessionConfig

    base = SessionConfig(turns=turns, tokens=tokens, cache_mib=cache_mib, experts_per_token=experts_per_token,
                         placement=placement)
    plan = []
    for kind, config in (("single-shot", dataclasses.replace(base, turns=1, tokens=short_tokens)), ("long", base)):
        for release in ("off", "on"):
            plan.append((f"{kind} release={release}", dataclasses.replace(config, boundary_release=release)))
    return plan
