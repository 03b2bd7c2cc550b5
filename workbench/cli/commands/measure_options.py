"""The options `workbench run`, `compare` and `external` share (one place, so their help reads the same)."""
from __future__ import annotations

from typing import Any, Callable

import click

from workbench.cli import numbers
from workbench.measure.run.order import DEFAULT_ORDER, ORDERS
from workbench.records import CACHE_STATES


def measure_option_list(cache_repeatable: bool) -> list[Callable[..., Any]]:
    if cache_repeatable:
        cache = click.option("--cache", "caches", type=click.Choice(CACHE_STATES), multiple=True,
                             default=("cold",), show_default=True,
                             help="Page-cache state set (and checked with mincore) before every run; repeat "
                                  "for several (each state is measured in turn, configs interleaved within it).")
    else:
        cache = click.option("--cache", type=click.Choice(CACHE_STATES), default="cold", show_default=True,
                             help="Page-cache state set (and checked with mincore) before every run.")
    return [
        cache,
        click.option("--runs", type=numbers.count(1, numbers.MAX_RUNS), default=5, show_default=True,
                     help="Fresh-process runs per configuration (≥ 5 for a claim; from 6 on, rounds are paired)."),
        click.option("--campaign", default="default", show_default=True, help="Ledger campaign."),
        click.option("--hypothesis", default="", help="What this attempt is meant to show."),
        click.option("--baseline", default=None,
                     help="Compare against this ledger attempt (id or prefix) of the same model, cache state "
                          "and device (another is refused)."),
        click.option("--baseline-across", "baseline_across", is_flag=True,
                     help="Accept a --baseline of another model, cache state or device: every ratio against "
                          "it then says ACROSS and what differs (tables, --json, exports)."),
        click.option("--min-effect", "min_effect_pct", type=numbers.amount(0, 100, high_open=True), default=2.0,
                     show_default=True, metavar="PERCENT",
                     help="Smallest speedup or slowdown worth a verdict (README: Measuring honestly)."),
        click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                     help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite)."),
        click.option("--timeout", "timeout_s", type=numbers.seconds(), default=600.0,
                     show_default=True, help="Seconds before a run is killed and recorded as failed."),
        click.option("--json", "as_json", is_flag=True, help="Print the attempts as JSON."),
    ]


def apply_options(options: list[Callable[..., Any]], fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


def measure_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options run, compare and external share (one --cache state: external)."""
    return apply_options(measure_option_list(cache_repeatable=False), fn)


def worker_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of commands that run strategies in workers (run, compare): --cache repeatable."""
    options = [
        click.option("--param", "params", multiple=True, metavar="K=V",
                     help="Strategy parameter (repeatable); with compare it applies to every strategy."),
        click.option("--device", default="host", show_default=True, help="host, host-uma, cuda[:n], hip[:n]."),
        click.option("--order", type=click.Choice(ORDERS), default=DEFAULT_ORDER, show_default=True,
                     help="Order inside each round: abba alternates A B, B A (drift cancels in pairs), "
                          "abab repeats A B, shuffle is seeded by --seed."),
        click.option("--seed", type=numbers.seed(), default=0, show_default=True, help="Seed of --order shuffle."),
        click.option("--verify/--no-verify", default=True, show_default=True,
                     help="Read the device bytes back after each run and compare them with the file."),
        click.option("--ranks", type=numbers.count(1, 64), default=None, metavar="N",
                     help="Load across N ranks (fresh processes, torch.distributed): the strategies are then "
                          "ranked ones (whole, ranges, shm, scatter); docs/multi-gpu.md."),
        click.option("--layout", type=click.Choice(("tp", "ep")), default="tp", show_default=True,
                     help="With --ranks: tensor-parallel (vLLM's slicing rule) or expert-parallel (MoE)."),
        *measure_option_list(cache_repeatable=True),
    ]
    return apply_options(options, fn)
