"""Notebook 08's panel: loads across several ranks (docs/multi-gpu.md) — the ranked strategies measured at
each rank count by the same runner as ``workbench compare --ranks`` (fresh rank processes per run, strategies
interleaved within a rank count, every rank's bytes read back), shown with the CLI's own table and lines
(so the notebook states no verdict the CLI would not) and each rank's window run by run."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from workbench.cli.notebooks.ui import Panel, ledger_path, parse_list
from workbench.output.untrusted import for_html
from workbench.records import CACHE_STATES


def ranks_panel(file: str = "", size: str = "8MiB", layout: str = "tp", ranks: str = "1,2",
                strategies: str = "whole,ranges,shm,scatter", runs: int = 5, cache: str = "warm",
                device: str = "host", campaign: str = "ranks", hypothesis: str = "",
                ledger: str | None = None, autorun: bool | None = None) -> list[Any]:
    """Show the panel (widgets); in batch (papermill, or ``autorun``) measure now and return the outputs."""
    import ipywidgets as w

    controls = {
        "file": w.Text(value=file, description="model", placeholder="empty: a synthetic bf16 safetensors set"),
        "size": w.Text(value=size, description="size"),
        "layout": w.Dropdown(options=("tp", "ep"), value=layout, description="layout"),
        "ranks": w.Text(value=ranks, description="ranks"),
        "strategies": w.Text(value=strategies, description="strategies", layout=w.Layout(width="70%")),
        "runs": w.BoundedIntText(value=runs, min=1, max=100, description="runs"),
        "cache": w.Dropdown(options=CACHE_STATES, value=cache, description="cache"),
        "device": w.Text(value=device, description="device"),
        "campaign": w.Text(value=campaign, description="campaign"),
        "hypothesis": w.Text(value=hypothesis, description="hypothesis", layout=w.Layout(width="70%")),
    }
    return Panel("Loads across ranks", controls, lambda v, say: ranks_outputs(v, say, ledger)).show(autorun)


def ranks_outputs(v: Mapping[str, Any], say: Callable[[str], None], ledger: str | None) -> list[Any]:
    from IPython.display import HTML

    from workbench.ledger import Ledger
    from workbench.ledger.figures.ranks import rank_windows
    from workbench.ledger.ranks import ranks_frame
    from workbench.measure.ranks.runner import measure_ranks, spread_line
    from workbench.measure.run.tables import attempts_table
    from workbench.records import RunConfig

    model = str(v["file"]) or synthetic_model(str(v["size"]), str(v["layout"]))
    out: list[Any] = []
    with Ledger(ledger_path(ledger)) as store:
        results = []
        for world in [int(x) for x in parse_list(str(v["ranks"]))]:
            say(f"measuring {world} ranks …")
            configs = [RunConfig(file=model, strategy=s.split()[0], device=str(v["device"]),
                                 params={**dict(w.split("=", 1) for w in s.split()[1:]), "ranks": str(world),
                                         "layout": str(v["layout"])})
                       for s in str(v["strategies"]).split(",") if s.strip()]
            results += measure_ranks(configs, runs=int(v["runs"]), cache=str(v["cache"]), ledger=store,
                                     campaign=str(v["campaign"]), hypothesis=str(v["hypothesis"]))
        lines = [f"{r.label}: {r.warning}" for r in results if r.warning]
        lines += [f"{r.label}: {spread_line(r.runs)}" for r in results if spread_line(r.runs)]
        out.append(HTML(f'<pre class="wb-results">{for_html(attempts_table(results))}</pre>'))
        out.append(HTML('<ul class="wb-ranks">' + "".join(f"<li>{for_html(x)}</li>" for x in lines) + "</ul>"))
        ranks = ranks_frame(store, str(v["campaign"]))
        ids = {r.attempt_id for r in results}
        ranks = ranks[ranks["attempt_id"].isin(ids)]
        if not ranks.empty:
            out.append(rank_windows(ranks, {r.attempt_id: r.label for r in results}))
    say(f"{len(results)} attempts recorded in {ledger_path(ledger)}")
    return out


def synthetic_model(size: str, layout: str) -> str:
    """A bf16 safetensors model under the data root's models, made once: dense for tp, MoE for ep."""
    from workbench.formats.synth import parse_size, write_synthetic
    from workbench.settings.paths import models_dir

    kind = "moe" if layout == "ep" else "dense"
    path = models_dir() / f"ranks-{kind}-{size}.safetensors"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic(path, format="safetensors", layout=kind, size=parse_size(size), dtype="bf16")
    return str(path)
