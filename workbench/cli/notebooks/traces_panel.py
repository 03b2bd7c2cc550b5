"""Notebook 07's panel and what it shows: the trace's statistics, hit rate against cache size per policy
beside Belady's bound, then the chosen configuration replayed as a session, simulated beside measured.

Every caveat the CLI prints for the same numbers is shown with them: ``trace simulate``'s (the gap rule's
drops, static not bounded by Belady's), ``session``'s warnings and its summary line (the hit rate with its
policy and budget, p99 with its caveat at small n). The actions are in :mod:`workbench.cli.notebooks.traces`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from workbench.cli.notebooks.actions import _best, _devices
from workbench.cli.notebooks.traces import REPLAY_CACHES
from workbench.cli.notebooks.ui import Panel, ledger_path, parse_list, results_html
from workbench.output.untrusted import for_html

POLICY_CHOICES = ("lru", "fifo", "lfu", "arc", "static", "belady")  # expert.policies.LAYER_POLICIES (lfu:W typed)


def trace_statistics(trace: Any, n_experts: int) -> tuple[Any, Any]:
    """The trace read (for a model of ``n_experts`` experts per layer) and its statistics."""
    from workbench.expert.traces import read_trace, trace_stats

    raw = read_trace(trace)
    raw = raw.with_experts(n_experts) if n_experts > raw.n_experts else raw
    return raw, trace_stats(raw)


def describe_trace(raw: Any) -> str:
    """One line, as ``workbench trace stats`` opens: what the trace holds."""
    gaps = "none" if raw.complete else "some (statistics stay inside runs of consecutive tokens)"
    layers = "MoE layers counted from 0" if raw.layer_kind == "ordinal" else "layers"
    return (f"{raw.source}: {len(raw.layers)} {layers}, {raw.tokens} tokens, k={raw.k} of {raw.n_experts} experts, "
            f"gate weights: {'yes' if raw.gates is not None else 'no'}, gaps: {gaps}")


def simulation_frame(doc: Mapping[str, Any]) -> Any:
    """A row per policy, a column per N: the hit rate and (not Belady) its fraction of Belady's, as the CLI's table."""
    import pandas as pd

    sizes = sorted({r["cache_experts"] for r in doc["results"]})
    cell = {(r["policy"], r["cache_experts"]): r for r in doc["results"]}
    rows = []
    for name in dict.fromkeys(r["policy"] for r in doc["results"]):
        row: dict[str, Any] = {"policy": name}
        for n in sizes:
            r = cell[(name, n)]
            frac = "—" if r["of_belady"] is None else f"{r['of_belady']:.2f}"
            row[f"N={n}"] = f"{r['hit_rate']:.3f}" if name == "belady" else f"{r['hit_rate']:.3f} ({frac})"
        rows.append(row)
    return pd.DataFrame(rows)


def _lines(css: str, lines: Sequence[str]) -> Any:
    from IPython.display import HTML

    return HTML(f'<div class="{css}">' + "".join(f"<p>{for_html(line)}</p>" for line in lines) + "</div>")


def trace_outputs(v: Mapping[str, Any], store: Any, say: Callable[[str], None]) -> list[Any]:
    """Everything the notebook shows for the values ``v`` (the parameters' names), in order."""
    from workbench.cli.notebooks import trace_figures as figs
    from workbench.cli.notebooks.traces import (predicted, replay_config, replay_frame, replay_session,
                                                simulate_trace, trace_inputs)
    from workbench.expert.routing import moe_shape
    from workbench.formats import open_index

    say("trace and model …")
    inputs = trace_inputs(v["trace"], v["file"], size=v["size"], experts=v["experts"], k=v["k"],
                          tokens=v["synthetic_tokens"], seed=v["seed"], skew=v["skew"], stickiness=v["stickiness"])
    _layers, n_model = moe_shape(open_index(inputs.model).blobs)
    raw, stats = trace_statistics(inputs.trace, n_model)
    summary = stats.summary.round(3)
    out = [_lines("wb-trace-notes", [describe_trace(raw), f"model: {inputs.model}", *inputs.notes]),
           results_html(summary, "wb-trace-stats"), figs.popularity_figure(stats), figs.overlap_figure(stats),
           figs.reuse_figure(stats), figs.working_set_figure(stats)]
    say("simulating …")
    sim = simulate_trace(inputs.trace, v["policies"], v["cache_experts"], raw.n_experts)
    doc = sim.to_json()
    out += [results_html(simulation_frame(doc), "wb-trace-sim"),
            _lines("wb-caveats", [*sim.caveats(), f"{sim.lookups:,} lookups simulated in {sim.seconds:.2f} s; "
                                  "each cell: hit rate (its fraction of Belady's MIN at that N)"])]
    if not v["replay_experts"]:
        return out + [figs.hit_rate_figure(doc)]
    config = replay_config(inputs, turns=v["turns"], tokens=v["tokens"], cache_experts=v["replay_experts"],
                           policy=v["replay_policy"], prefetch=v["prefetch"], overlap=v["overlap"], lanes=v["lanes"],
                           compute=v["compute"], seed=v["seed"], cache=v["replay_cache"])
    expected = predicted(inputs.model, config)
    say("replaying as a session …")
    result, warnings = replay_session(inputs.model, config, device=v["device"], store=store, campaign=v["campaign"],
                                      hypothesis=v["hypothesis"] or _hypothesis(expected, config), say=say)
    table = replay_frame(expected, result, config)
    row = table.iloc[0]
    marker = [{"policy": config.policy, "cache_experts": config.cache_experts, "hit_rate": row["measured hit rate"],
               "simulated": row["simulated hit rate"]}] if expected else []
    return out + [figs.hit_rate_figure(doc, marker), results_html(table, "wb-replay"),
                  _lines("wb-session", [*(f"warning: {w}" for w in warnings),
                                        f"session {result.attempt_id[:8]}: {result.verdict} — {result.notes}",
                                        f"cache {result.cache}; device {result.device}; model {result.file}; "
                                        f"recorded in {store}, campaign {v['campaign']}"])]


def _hypothesis(sim: Any, config: Any) -> str:
    """The replay's hypothesis when none is given: the simulator's prediction, so the ledger keeps it (a byte
    budget: what the session asks, which nothing predicts)."""
    if sim is None:
        return (f"prefetch {config.prefetch} with {config.policy} over {config.cache_mib:.2f} MiB (the bytes of the "
                f"per-layer N) on this trace")
    doc = sim.to_json()
    mine = [r for r in doc["results"] if r["policy"] != "belady"] or doc["results"]
    bound = next(r for r in doc["results"] if r["policy"] == "belady")
    return (f"{mine[0]['policy']} with {mine[0]['cache_experts']} experts a layer hits {mine[0]['hit_rate']:.2%} of "
            f"lookups over these {doc['tokens']} tokens, as simulated (Belady's MIN: {bound['hit_rate']:.2%})")


def traces_panel(*, trace: str, file: str, size: str, experts: int, k: int, synthetic_tokens: int, seed: int,
                 skew: float, stickiness: float, cache_experts: Sequence[int], policies: Sequence[str],
                 replay_experts: int, replay_policy: str, replay_cache: str, prefetch: str, overlap: bool, lanes: int, compute: str,
                 turns: int, tokens: int, device: str, campaign: str, hypothesis: str = "", ledger: str = "") -> Panel:
    """The panel of notebook 07: the trace (or the synthetic one's shape), the policies and sizes simulated,
    and the replayed session's configuration."""
    import ipywidgets as w

    wide = {"layout": w.Layout(width="70%")}
    initial = {"style": {"description_width": "initial"}}
    controls = {
        "trace": w.Text(value=trace, description="trace", placeholder="(a seeded sticky trace, written for the model)",
                        **wide),
        "file": w.Text(value=file, description="model", placeholder="(synthetic alignment-64 MoE, made if missing)",
                       **wide),
        "size": w.Text(value=size, description="size"),
        "experts": w.BoundedIntText(value=experts, min=1, max=1024, description="experts"),
        "k": w.BoundedIntText(value=k, min=1, max=64, description="k"),
        "synthetic_tokens": w.BoundedIntText(value=synthetic_tokens, min=1, max=1_000_000, description="trace tokens",
                                             **initial),
        "seed": w.BoundedIntText(value=seed, min=0, max=2**31 - 1, description="seed"),
        "skew": w.BoundedFloatText(value=skew, min=0, max=8, step=0.1, description="zipf s"),
        "stickiness": w.BoundedFloatText(value=stickiness, min=0, max=1, step=0.05, description="stickiness"),
        "cache_experts": w.Text(value=", ".join(map(str, cache_experts)), description="N simulated",
                                placeholder="(k, 2k, n/8, n/4, n/2, 3n/4)", **initial),
        "policies": w.SelectMultiple(options=sorted({*POLICY_CHOICES, *policies}), value=tuple(policies),
                                     description="policies", rows=6),
        "replay_experts": w.BoundedIntText(value=replay_experts, min=0, max=1024, description="N replayed",
                                           **initial),
        "replay_policy": w.Combobox(value=replay_policy, options=list(POLICY_CHOICES), description="policy"),
        "replay_cache": w.Dropdown(options=list(REPLAY_CACHES), value=replay_cache, description="cache"),
        "prefetch": w.Text(value=prefetch, description="prefetch"),
        "overlap": w.Checkbox(value=overlap, description="overlap"),
        "lanes": w.BoundedIntText(value=lanes, min=1, max=64, description="lanes"),
        "compute": w.Text(value=compute, description="compute"),
        "turns": w.BoundedIntText(value=turns, min=1, max=10_000, description="turns"),
        "tokens": w.BoundedIntText(value=tokens, min=1, max=100_000, description="tokens/turn"),
        "device": w.Dropdown(options=_devices(device), value=device or _best(), description="device"),
        "campaign": w.Text(value=campaign, description="campaign"),
        "hypothesis": w.Text(value=hypothesis, description="hypothesis", placeholder="(the simulator's prediction)",
                             **wide),
    }
    store = ledger_path(ledger)

    def action(values: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        v = dict(values)
        if isinstance(v["cache_experts"], str):
            v["cache_experts"] = parse_list(v["cache_experts"])
        v["policies"] = list(v["policies"])
        return trace_outputs(v, store, say)
    return Panel("Routing trace: statistics, policies against Belady's bound, a replayed session", controls, action)
