"""``workbench run | compare``: measure strategies in fresh worker processes, print a table, record in
the ledger (``external`` and ``ceilings`` have modules of their own)."""
from __future__ import annotations

import shlex
import sys
from typing import Any, Sequence

import click

from workbench.cli.commands.measure_options import worker_options
from workbench.cli.commands.results_out import Progress, report_results, unrecorded_printed
from workbench.cli.exits import EXIT_HELP, finish, tally_attempts
from workbench.cli.options import refuse_duplicates
from workbench.errors import MeasurementInterrupted, ParamError
from workbench.output.untrusted import for_terminal


def parse_params(items: Sequence[str], owner: str = "--param") -> dict[str, str]:
    """``["k=v", …]`` → ``{"k": "v"}``; anything without ``=`` is a ParamError."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParamError(owner, item, "expected K=V")
        if key.strip() in out:  # the later one would silently win
            raise ParamError(owner, key.strip(), f"given twice ({out[key.strip()]!r} and {value.strip()!r})")
        out[key.strip()] = value.strip()
    return out


def parse_strategy(text: str, common: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``"pread evict=1"`` → ("pread", {**common, "evict": "1"}): inline params win over --param."""
    words = shlex.split(text)
    if not words:
        raise ParamError("--strategy", text, "empty strategy")
    return words[0], {**common, **parse_params(words[1:], f"--strategy {words[0]}")}


@click.command(epilog=EXIT_HELP)
@click.argument("file", metavar="MODEL", type=click.Path())
@click.option("--strategy", required=True, help="Strategy name, optionally with inline K=V params.")
@click.option("--label", default="", help="Name of the attempt in tables (default: strategy, params · model name).")
@worker_options
def run(file: str, strategy: str, label: str, **opts: Any) -> None:
    """Measure one strategy on MODEL (a file, a directory, an index file or any shard of a set), a fresh
    worker process per run."""
    _run_configs(file, [strategy], [label] if label else None, **opts)


@click.command(epilog=EXIT_HELP)
@click.argument("file", metavar="MODEL", type=click.Path())
@click.option("--strategy", "strategies", multiple=True, required=True,
              help="Repeat for each strategy; e.g. --strategy \"pread evict=1\" --strategy mmap.")
@click.option("--label", "labels", multiple=True, help="One per --strategy, in the same order.")
@worker_options
def compare(file: str, strategies: tuple[str, ...], labels: tuple[str, ...], **opts: Any) -> None:
    """Measure strategies on MODEL (a file, a directory, an index file or any shard of a set)
    interleaved; the first is the baseline unless --baseline."""
    if len(strategies) < 2 and not opts["baseline"]:
        raise click.UsageError("compare needs two or more --strategy (or --baseline ATTEMPT_ID)")
    if labels and len(labels) != len(strategies):
        raise click.UsageError(f"{len(labels)} --label for {len(strategies)} --strategy")
    _run_configs(file, list(strategies), list(labels) or None, **opts)


def _run_configs(file: str, strategies: list[str], labels: list[str] | None, *, params: tuple[str, ...],
                 device: str, order: str, seed: int, verify: bool, caches: tuple[str, ...], runs: int,
                 campaign: str, hypothesis: str, baseline: str | None, ledger_path: str | None,
                 min_effect_pct: float, timeout_s: float, as_json: bool, baseline_across: bool,
                 ranks: int | None = None, layout: str = "tp") -> None:
    from workbench.measure.run.model import model_name
    from workbench.measure.run.runner import measure, open_ledger, preflight
    from workbench.records import RunConfig

    refuse_duplicates(f"workbench {click.get_current_context().info_name}", "--cache", caches)
    common = parse_params(params)
    if ranks is not None:  # a load across several ranks: docs/multi-gpu.md
        from workbench.measure.ranks.runner import measure_ranks as measure, preflight_ranks as preflight

        common = {**common, "ranks": str(ranks), "layout": layout}
    configs = []
    for text in strategies:
        name, merged = parse_strategy(text, common)
        configs.append(RunConfig(file=file, strategy=name, params=merged, device=device))
    preflight(configs)  # before the ledger opens or a bar draws: a bad input is one line, nothing else
    # The model's name in the label, as in the notebooks: attempts on two models must not read the same.
    labels = labels or [f"{c.display} · {model_name(file)}" for c in configs]
    ledger = open_ledger(ledger_path)
    _check_baseline(ledger, baseline, configs, caches, baseline_across)
    results: list[Any] = []
    interrupted = None
    single = len(strategies) == 1 and len(caches) == 1
    with unrecorded_printed(ledger, as_json, single, results), \
            Progress(len(configs) * runs * len(caches), as_json) as progress:
        try:
            for cache in caches:  # one attempt per config per state, interleaved within the state
                results += measure(configs, runs=runs, cache=cache, order=order, seed=seed, ledger=ledger,
                                   campaign=campaign, hypothesis=hypothesis, labels=labels, baseline=baseline,
                                   verify=verify, timeout_s=timeout_s, progress=progress,
                                   min_effect=min_effect_pct / 100, baseline_across=baseline_across)
        except MeasurementInterrupted as exc:
            interrupted = exc
    if interrupted is not None:  # after the bar is gone, so the line stands on its own
        _interrupted(interrupted, results, caches, len(configs) * runs * len(caches))
    report_results(results, ledger, as_json, single=single)
    finish(tally_attempts(results))


def _check_baseline(ledger: Any, baseline: str | None, configs: list[Any], caches: tuple[str, ...],
                    across: bool) -> None:
    """A --baseline of another model, state or device refused over every --cache state before the first
    is measured: one that fits cold but not warm must not leave the cold attempts recorded first."""
    if baseline:
        from workbench.measure.run.baseline import check_baseline
        from workbench.measure.run.model import Models

        check_baseline(ledger, baseline, configs, caches, Models(), across=across)


def _interrupted(exc: MeasurementInterrupted, finished: list[Any], caches: tuple[str, ...], total: int) -> None:
    """Say what Ctrl-C (or SIGTERM) kept, and how to measure the rest; exit 128 + the signal (130 for Ctrl-C)."""
    done_states = list(dict.fromkeys(r.cache_requested for r in finished))
    left = [c for c in caches if c not in done_states]
    kept = sum(len(r.runs) for r in finished)
    parts = [f"{kept} in {len(finished)} finished attempts ({', '.join(done_states)})"] if finished else []
    ids = ", ".join(f"{i[:8]}…" for i in exc.attempt_ids) or "no attempt"
    parts.append(f"{exc.done} in {ids} (marked failed: interrupted)")
    click.secho(for_terminal(f"interrupted: {kept + exc.done}/{total} runs recorded: {'; '.join(parts)}; resume with: "
                             f"{_resume_command(left)} (an interrupted attempt is measured afresh, never continued)"),
                fg="red", bold=True, err=True)
    from workbench.cli import interrupted_status

    sys.exit(interrupted_status(exc))


def _resume_command(caches: list[str]) -> str:
    """This command line with only the cache states still to measure."""
    ctx = click.get_current_context()
    argv = list(ctx.meta.get("workbench.argv") or [])
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--cache":
            skip = True
        elif not word.startswith("--cache="):
            kept.append(word)
    for cache in caches:
        kept += ["--cache", cache]
    return shlex.join(["workbench", ctx.info_name or "", *kept])
