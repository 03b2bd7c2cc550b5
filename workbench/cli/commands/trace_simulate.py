"""``workbench trace simulate``: hit rates of per-layer expert caches over a trace, policy by policy and
size by size, each beside Belady's bound (what the numbers mean: :mod:`workbench.expert.policies`)."""
from __future__ import annotations

import json

import click

from workbench.cli import numbers
from workbench.cli.commands.ledger_cells import echo_table
from workbench.output.untrusted import for_terminal

POLICY_NAMES = ("lru", "fifo", "lfu", "arc", "static", "belady")  # expert.policies.LAYER_POLICIES: --help stays light
DEFAULT_POLICIES = ("lru", "fifo", "lfu", "arc", "static")


def _sizes(values: tuple[str, ...]) -> list[int]:
    out = []
    for value in values:
        for part in filter(None, (p.strip() for p in value.split(","))):
            if not part.isdigit():
                from workbench.errors import ParamError

                raise ParamError("trace simulate", "--cache-experts", f"{value!r}: expected whole numbers of experts "
                                                                       "per layer (2, or 2,4,6)")
            out.append(int(part))
    return out


@click.command("simulate")
@click.argument("path", metavar="TRACE", type=click.Path(exists=True, dir_okay=False))
@click.option("--cache-experts", "sizes", multiple=True, required=True,
              help="Experts each layer's cache holds (repeat it, or 2,4,6): at least k, at most the experts per layer.")
@click.option("--policy", "policies", multiple=True,
              help=f"{' | '.join(POLICY_NAMES)} (lfu:W ages every W tokens); repeat it. Default: all; Belady's "
                   "bound is always run.")
@click.option("--experts", "n_experts", type=numbers.count(1, numbers.MAX_EXPERTS), default=None,
              help="The model's experts per layer (default: the largest expert id routed + 1): the most N can be, "
                   "and what static ranks.")
@click.option("--layers", "per_layer", is_flag=True, help="Also a table per cache size: each layer's hit rate.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {source, tokens, k, n_experts, results: [{policy, cache_experts, hit_rate, of_belady, "
                   "layers: [...]}]}.")
def simulate(path: str, sizes: tuple[str, ...], policies: tuple[str, ...], n_experts: int | None, per_layer: bool,
             as_json: bool) -> None:
    """Hit rate of per-layer caches of N experts on TRACE (the token's k experts pinned while served), per
    policy and size, overall and per layer, each as a fraction of Belady's MIN at that size. The trace is
    replayed as a session replays it: a token missing from any layer is dropped from all."""
    from workbench.cli.commands.trace_text import describe
    from workbench.expert.policies.simulate import run_simulation
    from workbench.expert.traces import dense_routing, read_trace

    raw = read_trace(path)
    raw = raw.with_experts(n_experts) if n_experts else raw
    sim = run_simulation(dense_routing(raw, n_experts=raw.n_experts), list(policies or DEFAULT_POLICIES), _sizes(sizes))
    if as_json:
        click.echo(json.dumps(sim.to_json(), indent=2))
        return
    click.echo(describe(raw))
    _echo(sim.to_json(), per_layer, sim.caveats())


def _echo(doc: dict, per_layer: bool, caveats: list[str]) -> None:
    sizes = sorted({r["cache_experts"] for r in doc["results"]})
    names = list(dict.fromkeys(r["policy"] for r in doc["results"]))
    cell = {(r["policy"], r["cache_experts"]): r for r in doc["results"]}
    click.echo(f"per-layer caches of N experts (of {doc['n_experts']}; k={doc['k']} pinned a token): hit rate, "
               "and its fraction of Belady's at that N")
    echo_table(("policy", *(f"N={n}" for n in sizes)),
               [(name, *(_rate(cell[(name, n)]) for n in sizes)) for name in names])
    if per_layer:
        for n in sizes:
            click.echo(f"N={n}: hit rate per layer")
            layers = [x["layer"] for x in cell[("belady", n)]["layers"]]
            rates = {name: [x["hit_rate"] for x in cell[(name, n)]["layers"]] for name in names}
            echo_table(("layer", *names), [(layer, *(f"{rates[name][i]:.3f}" for name in names))
                                           for i, layer in enumerate(layers)])
    for line in caveats:  # the gap rule's drops, static unbounded (Simulation.caveats: the notebook shows them too)
        click.echo(for_terminal(line))
    lookups = sum(r["lookups"] for r in doc["results"])
    rate = f", {doc['lookups_per_s'] / 1e6:.2f} M lookups/s" if doc["lookups_per_s"] else ""
    click.echo(f"{doc['tokens']} tokens x {len(doc['layers'])} layers x k={doc['k']}: {lookups:,} lookups simulated "
               f"in {doc['seconds']:.2f} s{rate}")


def _rate(r: dict) -> str:
    frac = "—" if r["of_belady"] is None else f"{r['of_belady']:.2f}"
    return f"{r['hit_rate']:.3f}" if r["policy"] == "belady" else f"{r['hit_rate']:.3f} ({frac})"
