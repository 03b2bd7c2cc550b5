"""``workbench session``: a long-lived MoE decode session through the expert cache, recorded per turn —
or, with ``--ab``, sessions compared arm against arm with verdicts.

The session runs in one worker process (``python -m workbench.measure.session.worker``), not in this
one: the memory and faults every turn records are the whole process's, so they must be the session's
alone (not click's, pandas' or SQLite's), this process never opens the device it measures (as the
runner's never does), and a session that crashes at turn 17 leaves 16 turns in the ledger. The device
lock (``measure/lock/device.py``) is held from the cache preparation to the last turn.
"""
from __future__ import annotations

import json
from typing import Any

import click

from workbench.cli import numbers
from workbench.cli.exits import EXIT_HELP, finish, tally_run
from workbench.output.untrusted import for_terminal

PLACEMENTS = ("inplace", "bounce", "aligned", "pool")  # expert.cache_options.CACHE_PLACEMENTS, spelled out: --help stays light
READERS = ("auto", "pread", "direct-bounce", "direct-inplace", "pread-random")
AB_ROUNDS = 6  # measure.session.ab.DEFAULT_ROUNDS, spelled out: the fewest paired by round, and a claim (>= 5)


@click.command(epilog=EXIT_HELP.replace("every run", "the session").replace("a run", "the session"))
@click.argument("file", type=click.Path(exists=True))
@click.option("--turns", type=numbers.count(1, numbers.MAX_TURNS), default=20, show_default=True, help="Turns in the session.")
@click.option("--tokens", type=numbers.count(1, numbers.MAX_TURNS), default=16, show_default=True, help="Decode tokens per turn.")
@click.option("--cache-mib", type=numbers.mebibytes(), default=None,
              help="Expert cache budget (MiB of expert slices); default half the expert bytes, at least two "
                   "tokens' working set.")
@click.option("--cache-experts", type=numbers.count(1, numbers.MAX_EXPERTS), default=None,
              help="Per-layer caches of N experts each (the token's k pinned) instead of a byte budget.")
@click.option("--experts-per-token", type=numbers.count(1, numbers.MAX_EXPERTS), default=None,
              help="Experts routed per layer per token (default: the trace's, else a quarter of the experts, 1–8).")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="inplace", show_default=True,
              help="Where slices sit in the per-layer buffers (inplace: O_DIRECT straight into place), or pool: "
                   "frames of one page-locked pool the size of the budget, any expert in any frame, sent to the "
                   "device straight from it.")
@click.option("--boundary-release", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="off reproduces the write-up's leak (boundary pages never released).")
@click.option("--release-advice", type=click.Choice(["dontneed", "free", "recycle"]), default="dontneed",
              show_default=True,
              help="How evicted pages go back: dontneed (now; a miss refills fresh zeroed pages), free "
                   "(MADV_FREE: the kernel takes them under pressure; a miss reuses them) or recycle (the "
                   "miss that evicted them takes them into its slot, mremap; the rest now).")
@click.option("--uploader", type=click.Choice(["pageable", "pinned"]), default="pageable", show_default=True,
              help="How landed slices reach the device: pageable copies from the cache, or through a small "
                   "ring of page-locked slots.")
@click.option("--upload-threads", type=numbers.count(1, numbers.MAX_THREADS), default=1, show_default=True,
              help="Threads copying landed slices out of the cache (either uploader). H200, 2026-12-03, warm, n = 6: 4 "
                   "threads left tok/s level (1.01x [0.89-1.03]): the time moved from uploads to reads.")
@click.option("--compute", default="none", show_default=True,
              help="none | sleep:MS (MS per token) | device (the routed experts' matmuls on the device).")
@click.option("--lanes", type=numbers.count(1, numbers.MAX_THREADS), default=1, show_default=True, help="Reader threads for misses.")
@click.option("--overlap/--no-overlap", default=False, show_default=True,
              help="Read the next layer's misses while this layer computes.")
@click.option("--prefetch", default="route", show_default=True,
              help="What --overlap stages ahead of a layer: route (its own routing, known ahead: a perfect "
                   "predictor) | none | previous (the previous token's experts) | popularity[:n=N,from=seen|trace] "
                   "| oracle[:precision=P,recall=R,seed=S] (the routing degraded).")
@click.option("--batch-misses/--no-batch-misses", default=False, show_default=True,
              help="Read and upload a layer together on the lanes: each lane reads a run of its misses (another "
                   "run of its hits) and sends it through page-locked slots, one copy a slot (needs --lanes > 1 or "
                   "--overlap; with --overlap, --prefetch route; not with --uploader pinned or --upload-threads).")
@click.option("--schedule", type=click.Choice(["landed", "eager"]), default="landed", show_default=True,
              help="When --overlap plans the next layer: landed (once this layer's copies are drained: the "
                   "write-up's loop) | eager (once this layer's hits are sent, before its misses are waited for: "
                   "the lanes never wait for the drain; with --prefetch route, unbatched).")
@click.option("--switch-interval-us", type=click.IntRange(0, 1_000_000), default=0, show_default=True,
              help="The interpreter's switch interval during the session, in µs (0: Python's own, 5,000): how long "
                   "one thread may run Python while a lane whose read returned waits for the lock.")
@click.option("--lane-handoff", type=click.Choice(["executor", "lock"]), default="executor", show_default=True,
              help="How a read reaches a lane and its outcome comes back: executor (the standard library's thread "
                   "pool and futures) | lock (one plain queue, a bare lock a job: less Python under the interpreter's "
                   "lock a read).")
@click.option("--miss", type=click.Choice(["fetch", "host", "auto"]), default="fetch", show_default=True,
              help="How a miss is served: fetch (read, upload, compute on the device) | host (computed on the host "
                   "where it lies: the file's mapping) | auto (per miss, the cheaper as measured in the session).")
@click.option("--gate", type=numbers.amount(0, 1), default=None,
              help="Resident fraction at which a miss is read buffered from the page cache (default: off).")
@click.option("--gate-scope", type=click.Choice(["blob", "file"]), default="blob", show_default=True,
              help="blob: measured at each miss; file: the whole model once per process (the first write-up).")
@click.option("--memory-limit", "memory_limit_mib", type=numbers.mebibytes(), default=None,
              help="Run under this many MiB (a memory cgroup, else a locked balloon).")
@click.option("--trace", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Routing trace (.csv / .npy of token,layer,expert, .jsonl records, .npy [tokens, layers, k]) "
                   "or a model fitted by `workbench trace fit` (.json: turns x tokens synthesized, --seed); "
                   "default a seeded synthetic one.")
@click.option("--distribution", type=click.Choice(["uniform", "zipf"]), default="uniform", show_default=True,
              help="Synthetic routing: uniform, or Zipf-skewed popularity per layer.")
@click.option("--seed", type=numbers.seed(), default=0, show_default=True, help="Seed of the synthetic routing.")
@click.option("--reader", type=click.Choice(READERS), default="auto", show_default=True,
              help="How misses are read (auto: by placement).")
@click.option("--policy", default="lru", show_default=True,
              help="Eviction: lru | fifo; with --cache-experts also lfu (lfu:W ages every W tokens) | arc | static | "
                   "belady (see `workbench trace simulate`).")
@click.option("--steady-window", type=numbers.count(2, numbers.MAX_TURNS), default=5, show_default=True,
              help="Turns in the trailing window of the steady-state test.")
@click.option("--steady-slope", "steady_slope_pct", type=numbers.amount(0, 1000, low_open=True), default=2.0,
              show_default=True, help="Steady when the window's slope is within this % of its mean per turn.")
@click.option("--device", default="host", show_default=True, help="host or cuda[:n] (hip[:n] too).")
@click.option("--cache", type=click.Choice(["cold", "warm", "asis"]), default="asis", show_default=True,
              help="Page-cache state of the model's files before the session (before every cell).")
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Read every upload back and compare it with the file (slows the turns).")
@click.option("--verify-end/--no-verify-end", default=None,
              help="After each turn, untimed, check the last layer's uploads; at the end, the cache (on with --ab).")
@click.option("--ab", "ab", multiple=True,
              help="An arm: 'key=value ...' over these options; the first is the baseline.")
@click.option("--rounds", type=numbers.count(1, numbers.MAX_ROUNDS), default=AB_ROUNDS, show_default=True,
              help="A/B rounds (ABBA order); paired by round from 6, and fewer than 5 is not a claim.")
@click.option("--campaign", default="default", show_default=True, help="Ledger campaign.")
@click.option("--hypothesis", default="", help="What this session is meant to show.")
@click.option("--label", default="", help="Name of the session in tables.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--timeout", "timeout_s", type=numbers.seconds(), default=3600.0,
              show_default=True, help="Seconds before a session is killed and recorded as failed.")
@click.option("--json", "as_json", is_flag=True, help="Print {turns: [...], summary: {...}} (A/B: arms, effects).")
def session(file: str, device: str, cache: str, ab: tuple[str, ...], rounds: int, campaign: str, hypothesis: str,
            label: str, ledger_path: str | None, timeout_s: float, as_json: bool, verify_end: bool | None,
            **options: Any) -> None:
    """Run TURNS × TOKENS decode tokens over FILE's experts (a model file, shard, index or directory)."""
    from workbench.expert.session_config import SessionConfig

    config = SessionConfig(verify_end=bool(ab) if verify_end is None else verify_end, **options)
    common = dict(campaign=campaign, hypothesis=hypothesis, ledger=ledger_path, timeout_s=timeout_s)
    if ab:
        _run_ab(file, config, ab, rounds, device, cache, as_json, common)
        return
    from workbench.measure.session.runner import measure_session

    say = None if as_json else _print_turn
    result = measure_session(file, config, device=device, cache=cache, label=label, on_turn=say,
                             on_start=None if as_json else _print_start, **common)
    if as_json:
        click.echo(json.dumps(result.report.to_json() if result.report else {"turns": [], "summary": {}}, indent=2))
    else:
        _print_summary(result)
    if result.error:
        click.secho(for_terminal(f"session failed: {result.error}"), fg="red", err=True)
    reached = not result.cache.startswith("asis(unreachable")
    finish(tally_run(result.error, result.verdict != "failed", None, cache, reached), what="sessions")


def _run_ab(file: str, config: Any, specs: tuple[str, ...], rounds: int, device: str, cache: str, as_json: bool,
            common: dict[str, Any]) -> None:
    import contextlib

    from workbench.measure.session.pressure import held_for_cells
    from workbench.measure.run.runner import open_ledger
    from workbench.measure.session.runner import measure_session, preflight_session
    from workbench.measure.session.ab import parse_ab, record_verdicts, run_session_ab

    arms = [parse_ab(spec, config, cache, device) for spec in specs]
    for arm in arms:  # every arm against the model before the ledger opens: a bad arm B records no cell of A
        preflight_session(file, arm.config, arm.device)
    limits = {arm.config.memory_limit_mib for arm in arms}
    # one limit for every arm and no cgroup here: one balloon over all cells, inflated before the first
    held = held_for_cells(limits.pop()) if len(limits) == 1 and None not in limits else None
    store = open_ledger(common.pop("ledger"))
    try:
        with held if held is not None else contextlib.nullcontext():
            def cell(arm: Any, label: str) -> Any:
                return measure_session(file, arm.config, device=arm.device, cache=arm.cache, label=label,
                                       ledger=store, pressure=held, **common)

            say = (lambda _m: None) if as_json else (lambda m: click.echo(for_terminal(f"[ab] {m}"), err=True))
            result = run_session_ab(file, arms, rounds, run_cell=cell, say=say)
        record_verdicts(store, result)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(_ab_json(result), indent=2))
    else:
        _print_ab(result)
    if result.failed_checks:
        raise SystemExit(1)


def _ab_json(result: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {"arms": [{"label": a.label, "cache": a.cache, "device": a.device, "changed": list(a.changed)}
                     for a in result.arms],
            "cells": [{"arm": i, "round": r, "attempt_id": c.attempt_id, "verdict": c.verdict, "error": c.error,
                       "figures": f, "memory": _memory_json(c),
                       "summary": c.report.summary.to_json() if c.report else None}
                      for (i, r, c), f in zip(result.cells, result.figures)],
            "effects": [asdict(e) for e in result.effects], "checks": list(result.checks),
            "skipped_turns": result.skipped_turns}


def _memory_json(cell: Any) -> dict[str, str] | None:
    if not cell.memory_method:
        return None
    return {"method": cell.memory_method, "enforced": cell.memory_limit, "outcome": cell.memory_kind,
            "detail": cell.memory_outcome}


def _host_share(f: dict[str, float]) -> str:
    """A cell's misses computed on the host and its host ms a token, where any were (--miss host|auto)."""
    share = f.get("host share", -1.0)
    return f", host share {share:.3f} ({f['host ms/token']:.2f} host ms/token)" if share > 0 else ""


def _print_ab(result: Any) -> None:
    skipped = (f"; each cell's figures, like the effects, leave out its first {result.skipped_turns} turn (the "
               "cache filling)") if result.skipped_turns else "; every turn counts (fewer than 3 a cell)"
    click.echo(for_terminal(f"A/B over {len(result.cells)} cells (ABBA), baseline {result.arms[0].label!r}{skipped}"))
    methods = sorted({c.memory_method for _, _, c in result.cells if c.memory_method})
    if methods:
        click.echo(f"memory limit enforced by {' and '.join(methods)}; each cell: how, and its outcome (OOM, "
                   "killed, own-files, reclaim or none)")
    for (i, r, c), f in zip(result.cells, result.figures):
        line = (f"tok/s {f['tok/s']:.2f}, hit rate {f['hit rate']:.3f}{_host_share(f)}, residual "
                f"{f['residual s/token'] * 1e3:.2f} ms/token, bookkeeping "
                f"{f['bookkeeping s/token'] * 1e3:.2f} ms/token, shift copy {f['shift MiB/token']:.2f} MiB/token "
                f"{f['shift ms/token']:.2f} ms/token, staged {f['staged GB/s']:.2f} GB/s, unreleased "
                f"{f['unreleased pages']:,.0f}, cores busy {f['cores busy']:.2f}, per token ms p50 "
                f"{f['token p50 ms']:.2f} p99 {f['token p99 ms']:.2f} (n = {f['tokens']:.0f}), stall "
                f"{f['stall ms/token']:.2f} ms/token{_predicted(f)}") if f else f"FAILED {c.error}"
        click.echo(for_terminal(f"  {result.arms[i].label:<28} round {r + 1}: {c.attempt_id[:8]} {line}"))
        if c.memory_method:
            click.echo(for_terminal(f"    memory {c.memory_kind}: {c.memory}"))
    for e in result.effects:
        click.echo(for_terminal(f"{e.arm}: {e.line()}"))
    for check in result.checks:
        click.echo(for_terminal(f"check {check}"))


def _predicted(f: dict[str, float]) -> str:
    """A cell's predictor: precision, recall, MiB/token read ahead and unused (nothing without one)."""
    if f["precision"] < 0 and f["recall"] < 0:
        return ""
    shown = lambda v: "—" if v < 0 else f"{v:.2f}"  # noqa: E731
    return (f", prefetch precision {shown(f['precision'])} recall {shown(f['recall'])}, read ahead "
            f"{f['prefetch MiB/token']:.2f} MiB/token ({f['unused MiB/token']:.2f} unused by its layer, "
            f"{f['never used MiB/token']:.2f} never used){_skipped(f)}")


def _skipped(f: dict[str, float]) -> str:
    """What a predictor did not stage because the layers ran on the host (nothing when none did)."""
    if f.get("skipped share", -1.0) <= 0:
        return ""
    return (f"; {f['skipped share']:.0%} of its layers ran on the host, skipped (not scored; "
            f"{f['skipped MiB/token']:.2f} MiB/token not staged)")


_TURN_HEADER = (f"{'turn':>4} {'tok/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'hit':>5} {'read s':>7} {'upl s':>6} {'book s':>6} {'comp s':>7} "
                f"{'resid ms/t':>10} {'shift MiB/t':>11} {'disk MiB/t':>10} {'QD':>4} {'majflt':>6} {'unreleased':>10} "
                f"{'anon-acct MiB':>13} {'GB/s':>6} of wall (misses staged)")


def _print_start(facts: Any) -> None:
    for warning in facts.warnings:
        click.secho(for_terminal(f"warning: {warning}"), fg="yellow", err=True)


def _print_turn(r: Any) -> None:
    if r.turn == 0:  # the header with the first turn: a refusal before it stays one line
        click.echo(_TURN_HEADER, err=True)
    from workbench.records.token_tail import tail
    from workbench.measure.session.wall import wall_text

    gap = (r.held_anon_bytes - r.accounted_bytes) / 2**20 if r.actual_anon_bytes >= 0 else float("nan")
    ms = tail(r.token_s)
    p50, p99 = (ms.p50 * 1e3, ms.p99 * 1e3) if ms else (float("nan"), float("nan"))
    click.echo(f"{r.turn:>4} {r.tokens_per_s:>8.1f} {p50:>7.2f} {p99:>7.2f} {r.hit_rate:>5.0%} {r.stall_read_s:>7.3f} {r.stall_upload_s:>6.3f} "
               f"{r.bookkeeping_s:>6.3f} {r.compute_s:>7.3f} {r.residual_s_per_token * 1e3:>10.2f} "
               f"{r.shift_copy_bytes / r.tokens / 2**20:>11.2f} {r.disk_bytes_per_token / 2**20:>10.2f} "
               f"{r.read_queue_depth:>4.1f} {r.majflt:>6} {r.unreleased_pages:>10} {gap:>13.1f} {r.staged_gbps:>6.2f} "
               f"{wall_text(r)}", err=True)


def _print_summary(result: Any) -> None:
    click.echo(for_terminal(f"session {result.attempt_id[:8]}: {result.verdict} — {result.notes}"))
    if result.memory:
        click.echo(for_terminal(f"memory limit: {result.memory}"))
    click.echo(for_terminal(f"cache {result.cache}; device {result.device}; model {result.file}"))
