"""``workbench session``: a long-lived decode session through the expert cache, recorded per turn.

The session runs in one worker process (``python -m workbench.measure.session_worker``), not in this
one: the memory and faults every turn records are the whole process's, so they must be the session's
alone (not click's, pandas' or SQLite's), this process never opens the device it measures (as the
runner's never does), and a session that crashes at turn 17 leaves 16 turns in the ledger. The device
lock (``measure/lock.py``) is held from the cache preparation to the last turn.
"""
from __future__ import annotations

import json
from typing import Any

import click

from workbench.cli.exits import EXIT_HELP, finish, tally_run

PLACEMENTS = ("inplace", "bounce", "aligned")  # workbench.expert.PLACEMENTS, spelled out: --help stays light
READERS = ("auto", "pread", "direct-bounce", "direct-inplace")


@click.command(epilog=EXIT_HELP.replace("every run", "the session").replace("a run", "the session"))
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--turns", type=click.IntRange(1), required=True, help="Turns in the session.")
@click.option("--tokens", type=click.IntRange(1), required=True, help="Decode tokens per turn.")
@click.option("--cache-mib", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Expert cache budget (MiB of expert slices).")
@click.option("--experts-per-token", type=click.IntRange(1), default=None,
              help="Experts routed per layer per token (default: the trace's, else min(8, experts)).")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="inplace", show_default=True,
              help="Where slices sit in the per-layer buffers (inplace: O_DIRECT straight into place).")
@click.option("--boundary-release", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="off reproduces the write-up's leak (boundary pages never released).")
@click.option("--trace", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Routing trace (CSV or .npy of token,layer,expert); default a seeded synthetic one.")
@click.option("--distribution", type=click.Choice(["uniform", "zipf"]), default="uniform", show_default=True,
              help="Synthetic routing: uniform, or Zipf-skewed popularity per layer.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic routing.")
@click.option("--reader", type=click.Choice(READERS), default="auto", show_default=True,
              help="How misses are read (auto: by placement).")
@click.option("--device", default="host", show_default=True, help="host or cuda[:n] (hip[:n] too).")
@click.option("--cache", type=click.Choice(["cold", "warm", "asis"]), default="asis", show_default=True,
              help="Page-cache state of the model file before the session.")
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Read every upload back and compare it with the file (slows the turns).")
@click.option("--campaign", default="default", show_default=True, help="Ledger campaign.")
@click.option("--hypothesis", default="", help="What this session is meant to show.")
@click.option("--label", default="", help="Name of the session in tables.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=3600.0,
              show_default=True, help="Seconds before the session is killed and recorded as failed.")
@click.option("--json", "as_json", is_flag=True, help="Print {turns: [...], summary: {...}} as JSON.")
def session(file: str, turns: int, tokens: int, cache_mib: float, experts_per_token: int | None, placement: str,
            boundary_release: str, trace: str | None, distribution: str, seed: int, reader: str, device: str,
            cache: str, verify: bool, campaign: str, hypothesis: str, label: str, ledger_path: str | None,
            timeout_s: float, as_json: bool) -> None:
    """Run TURNS × TOKENS decode tokens over FILE's experts through the expert cache, in one process."""
    from workbench.expert.session import SessionConfig
    from workbench.measure.session import measure_session

    config = SessionConfig(turns=turns, tokens=tokens, cache_mib=cache_mib, experts_per_token=experts_per_token,
                           placement=placement, boundary_release=boundary_release, trace=trace,
                           distribution=distribution, seed=seed, reader=reader, verify=verify)
    say = None if as_json else _print_turn
    result = measure_session(file, config, device=device, cache=cache, ledger=ledger_path, campaign=campaign,
                             hypothesis=hypothesis, label=label, timeout_s=timeout_s, on_turn=say)
    if as_json:
        click.echo(json.dumps(result.report.to_json() if result.report else {"turns": [], "summary": {}}, indent=2))
    else:
        _print_summary(result)
    if result.error:
        click.secho(f"session failed: {result.error}", fg="red", err=True)
    reached = not result.cache.startswith("asis(unreachable")
    finish(tally_run(result.error, result.verdict != "failed", None, cache, reached), what="sessions")


_TURN_HEADER = f"{'turn':>4} {'tok/s':>9} {'hits':>7} {'misses':>7} {'evict':>7} {'minflt':>8} " \
               f"{'majflt':>6} {'unreleased':>10} {'anon-accounted MiB':>18}"


def _print_turn(r: Any) -> None:
    if r.turn == 0:  # the header with the first turn: a refusal before it stays one line
        click.echo(_TURN_HEADER, err=True)
    gap = (r.actual_anon_bytes - r.accounted_bytes) / 2**20 if r.actual_anon_bytes >= 0 else float("nan")
    click.echo(f"{r.turn:>4} {r.tokens_per_s:>9.1f} {r.hits:>7} {r.misses:>7} {r.evictions:>7} {r.minflt:>8} "
               f"{r.majflt:>6} {r.unreleased_pages:>10} {gap:>18.1f}", err=True)


def _print_summary(result: Any) -> None:
    click.echo(f"session {result.attempt_id[:8]}: {result.verdict} — {result.notes}")
    click.echo(f"cache {result.cache}; device {result.device}; file {result.file}")
