"""``workbench run | compare | external | ceilings``: measure, print a table, record in the ledger."""
from __future__ import annotations

import contextlib
import json
import shlex
import sys
from typing import Any, Callable, Iterator, Sequence

import click

from workbench.cli.options import refuse_duplicates
from workbench.errors import MeasurementInterrupted, ParamError
from workbench.measure.order import DEFAULT_ORDER, ORDERS
from workbench.records import CACHE_STATES


def _measure_option_list(cache_repeatable: bool) -> list[Callable[..., Any]]:
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
        click.option("--runs", type=click.IntRange(1), default=5, show_default=True,
                     help="Fresh-process runs per configuration (≥ 5 for a claim; from 6 on, rounds are paired)."),
        click.option("--campaign", default="default", show_default=True, help="Ledger campaign."),
        click.option("--hypothesis", default="", help="What this attempt is meant to show."),
        click.option("--baseline", default=None, help="Compare against this ledger attempt (id or prefix)."),
        click.option("--min-effect", "min_effect_pct", type=click.FloatRange(0, 100, max_open=True), default=2.0,
                     show_default=True, metavar="PERCENT",
                     help="Smallest speedup or slowdown worth a verdict (README: Measuring honestly)."),
        click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                     help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite)."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=600.0,
                     show_default=True, help="Seconds before a run is killed and recorded as failed."),
        click.option("--json", "as_json", is_flag=True, help="Print the attempts as JSON."),
    ]


def _apply(options: list[Callable[..., Any]], fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


def _measure_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options run, compare and external share (one --cache state: external)."""
    return _apply(_measure_option_list(cache_repeatable=False), fn)


def _worker_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of commands that run strategies in workers (run, compare): --cache repeatable."""
    options = [
        click.option("--param", "params", multiple=True, metavar="K=V",
                     help="Strategy parameter (repeatable); with compare it applies to every strategy."),
        click.option("--device", default="host", show_default=True, help="host, host-uma, cuda[:n], hip[:n]."),
        click.option("--order", type=click.Choice(ORDERS), default=DEFAULT_ORDER, show_default=True,
                     help="Order inside each round: abba alternates A B, B A (drift cancels in pairs), "
                          "abab repeats A B, shuffle is seeded by --seed."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of --order shuffle."),
        click.option("--verify/--no-verify", default=True, show_default=True,
                     help="Read the device bytes back after each run and compare them with the file."),
        *_measure_option_list(cache_repeatable=True),
    ]
    return _apply(options, fn)


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


@click.command()
@click.argument("file", metavar="MODEL", type=click.Path())
@click.option("--strategy", required=True, help="Strategy name, optionally with inline K=V params.")
@click.option("--label", default="", help="Name of the attempt in tables (default: strategy, params · model name).")
@_worker_options
def run(file: str, strategy: str, label: str, **opts: Any) -> None:
    """Measure one strategy on MODEL (a file, a directory, an index file or any shard of a set), a fresh
    worker process per run."""
    _run_configs(file, [strategy], [label] if label else None, **opts)


@click.command()
@click.argument("file", metavar="MODEL", type=click.Path())
@click.option("--strategy", "strategies", multiple=True, required=True,
              help="Repeat for each strategy; e.g. --strategy \"pread evict=1\" --strategy mmap.")
@click.option("--label", "labels", multiple=True, help="One per --strategy, in the same order.")
@_worker_options
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
                 min_effect_pct: float, timeout_s: float, as_json: bool) -> None:
    from workbench.measure.model import model_name
    from workbench.measure.runner import measure, open_ledger, preflight
    from workbench.records import RunConfig

    refuse_duplicates(f"workbench {click.get_current_context().info_name}", "--cache", caches)
    common = parse_params(params)
    configs = []
    for text in strategies:
        name, merged = parse_strategy(text, common)
        configs.append(RunConfig(file=file, strategy=name, params=merged, device=device))
    preflight(configs)  # before the ledger opens or a bar draws: a bad input is one line, nothing else
    # The model's name in the label, as in the notebooks: attempts on two models must not read the same.
    labels = labels or [f"{c.display} · {model_name(file)}" for c in configs]
    ledger = open_ledger(ledger_path)
    results: list[Any] = []
    interrupted = None
    single = len(strategies) == 1 and len(caches) == 1
    with _unrecorded_printed(ledger, as_json, single, results), \
            _progress(len(configs) * runs * len(caches), as_json) as progress:
        try:
            for cache in caches:  # one attempt per config per state, interleaved within the state
                results += measure(configs, runs=runs, cache=cache, order=order, seed=seed, ledger=ledger,
                                   campaign=campaign, hypothesis=hypothesis, labels=labels, baseline=baseline,
                                   verify=verify, timeout_s=timeout_s, progress=progress,
                                   min_effect=min_effect_pct / 100)
        except MeasurementInterrupted as exc:
            interrupted = exc
    if interrupted is not None:  # after the bar is gone, so the line stands on its own
        _interrupted(interrupted, results, caches, len(configs) * runs * len(caches))
    _report(results, ledger, as_json, single=single)


def _interrupted(exc: MeasurementInterrupted, finished: list[Any], caches: tuple[str, ...], total: int) -> None:
    """Say what Ctrl-C kept, and how to measure the rest; exit 130 (the shell's code for SIGINT)."""
    done_states = list(dict.fromkeys(r.cache_requested for r in finished))
    left = [c for c in caches if c not in done_states]
    kept = sum(len(r.runs) for r in finished)
    parts = [f"{kept} in {len(finished)} finished attempts ({', '.join(done_states)})"] if finished else []
    ids = ", ".join(f"{i[:8]}…" for i in exc.attempt_ids) or "no attempt"
    parts.append(f"{exc.done} in {ids} (marked failed: interrupted)")
    click.secho(f"interrupted: {kept + exc.done}/{total} runs recorded: {'; '.join(parts)}; resume with: "
                f"{_resume_command(left)} (an interrupted attempt is measured afresh, never continued)",
                fg="red", bold=True, err=True)
    sys.exit(130)


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


@click.command()
@click.option("--cmd", "commands", multiple=True, required=True,
              help="The engine's command line, run as an argument list (shell quoting, no shell unless "
                   "--shell); repeat for an A/B — the first is the baseline.")
@click.option("--label", "labels", multiple=True, help="Name of each attempt in tables, one per --cmd.")
@click.option("--marker", "markers", multiple=True, required=True,
              help="Regular expression of the output line that ends the load: one for all, or one per --cmd.")
@click.option("--start-marker", "start_markers", multiple=True,
              help="Regular expression of the line that starts the load window (else: spawn); spawn → end "
                   "marker is then the run's wall. One for all, or one per --cmd.")
@click.option("--phase", "phases", multiple=True, metavar="RE",
              help="The engine's own phase lines: a regular expression with groups (?P<name>…) and "
                   "(?P<ms>…) or (?P<s>…), matched on every line up to the marker (repeatable).")
@click.option("--binary", "binaries", multiple=True, metavar="PATH",
              help="The file that identifies each build, one per --cmd ('' = resolve from the command: "
                   "its executable, or interpreter + script).")
@click.option("--shell", is_flag=True, help="Run the commands through /bin/sh instead of as argument lists.")
@click.option("--file", "file", required=True, type=click.Path(exists=True),
              help="The model the command loads — a file, or a directory / index file / shard of a set: "
                   "the cache state of every file, the identity, GB/s.")
@click.option("--device", default=None,
              help="The device the engine loads onto: the lock held and the device recorded "
                   "(host, cuda[:n], hip[:n]; default: the best available, cuda, hip, else host).")
@click.option("--order", type=click.Choice(ORDERS), default=DEFAULT_ORDER, show_default=True,
              help="Order inside each round: abba alternates A B, B A (drift cancels in pairs), abab repeats "
                   "A B, shuffle is seeded by --seed.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --order shuffle.")
@_measure_options
def external(commands: tuple[str, ...], labels: tuple[str, ...], markers: tuple[str, ...],
             start_markers: tuple[str, ...], phases: tuple[str, ...], binaries: tuple[str, ...], shell: bool,
             file: str, device: str | None, order: str, seed: int, cache: str, runs: int, campaign: str,
             hypothesis: str, baseline: str | None, ledger_path: str | None, min_effect_pct: float,
             timeout_s: float, as_json: bool) -> None:
    """Time external engines: spawn (or --start-marker) → the first output line matching --marker, then
    kill the process group. Several --cmd are measured interleaved, one attempt each, with verdicts."""
    from workbench.measure.engine_command import check_command
    from workbench.measure.external import EngineCommand, measure_engines
    from workbench.measure.runner import open_ledger

    n = len(commands)
    if labels and len(labels) != n:
        raise click.UsageError(f"{len(labels)} --label for {n} --cmd")
    engines = [EngineCommand(cmd, marker, start_marker=start or None, phases=phases, shell=shell,
                             binary=binary or None, label=label)
               for cmd, marker, start, binary, label in zip(
                   commands, _per_command(markers, n, "--marker"), _per_command(start_markers, n, "--start-marker"),
                   _per_command(binaries, n, "--binary"), labels or [""] * n)]
    for engine in engines:  # before the ledger opens or a bar draws: a bad command is one line, nothing else
        check_command(engine)
    if device is None:
        from workbench.upload import best_device

        device = best_device()
        if not as_json:
            click.echo(f"device: {device} (the best available here; --device names the engine's)", err=True)
    ledger = open_ledger(ledger_path)
    with _unrecorded_printed(ledger, as_json, n == 1, []), _progress(n * runs, as_json) as progress:
        results = measure_engines(engines, file, runs=runs, cache=cache, order=order, seed=seed,
                                  timeout_s=timeout_s, device=device, baseline=baseline, ledger=ledger,
                                  campaign=campaign, hypothesis=hypothesis, progress=progress,
                                  min_effect=min_effect_pct / 100)
    _report(results, ledger, as_json, single=n == 1)


def _per_command(values: Sequence[str], n: int, option: str) -> list[str | None]:
    """One value per command: none given, one for all, or exactly one each."""
    if not values:
        return [None] * n
    if len(values) == 1:
        return list(values) * n
    if len(values) != n:
        raise click.UsageError(f"{len(values)} {option} for {n} --cmd: give one for all, or one per --cmd")
    return list(values)


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, exists=True), default=None,
              help="Directory on the file system to measure (default: cwd).")
@click.option("--device", "devices", multiple=True, help="Backend(s) for host→device copies (default: host).")
@click.option("--size", default="512MiB", show_default=True, help="Scratch file size, e.g. 256MiB, 2GiB.")
@click.option("--threads", type=click.IntRange(1), default=None, help="Most reader threads (default: cores).")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: $WORKBENCH_LEDGER, else data/ledger.sqlite).")
@click.option("--json", "as_json", is_flag=True, help="Print the ceilings as JSON.")
@click.option("--file", "model_file", type=click.Path(exists=True), default=None,
              help="Also read this model whole — every file of a set (a directory, index file or shard) — "
                   "cold and warm: the walls its loads are held against.")
def ceilings(directory: str | None, devices: tuple[str, ...], size: str, threads: int | None,
             ledger_path: str | None, as_json: bool, model_file: str | None) -> None:
    """Measure this machine's bandwidth walls and store them in the ledger for this host."""
    from workbench.formats.synth import parse_size
    from workbench.measure.ceilings import measure_ceilings, thread_counts
    from workbench.measure.runner import open_ledger

    refuse_duplicates("workbench ceilings", "--device", devices)
    ledger = open_ledger(ledger_path)
    say = None if as_json else (lambda msg: click.echo(f"measuring {msg} …", err=True))
    report = measure_ceilings(directory, devices=devices or ("host",), size=parse_size(size),
                              threads=thread_counts(threads) if threads else None, ledger=ledger,
                              progress=say, file=model_file)
    if as_json:
        click.echo(json.dumps({**report.to_json(), "ledger": str(ledger.path)}, indent=2))
        return
    from workbench.measure.tables import ceilings_table

    click.echo(ceilings_table(report))
    for name, reason in report.skipped:
        click.secho(f"not measured: {name}: {reason}", fg="yellow", err=True)
    click.echo(f"ledger: {ledger.path} (host {report.host})")


class _progress:
    """A tqdm bar on stderr fed by the runner's progress callback; silent with --json."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.bar = total, quiet, None

    def __enter__(self) -> Callable[..., None] | None:
        if self.quiet:
            return None
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, unit="run", file=sys.stderr, leave=False)
        return self._update

    def _update(self, done: int, total: int, config: Any, run: Any) -> None:
        last = "FAILED" if run.error else f"{run.load_s * 1e3:.1f} ms"
        self.bar.set_postfix_str(f"{config.display}: {last}")
        self.bar.update(1)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def _unrecorded_printed(ledger: Any, as_json: bool, single: bool, earlier: list[Any]) -> Iterator[None]:
    """When the ledger failed mid-measurement, print the numbers anyway — ``earlier`` attempts (recorded)
    and the unrecorded ones, as a table or JSON; the JSON on stdout too when no dump file could be
    written — then let the one-line error through (exit 2)."""
    from workbench.errors import UnrecordedResults

    try:
        yield
    except UnrecordedResults as exc:
        _report([*earlier, *exc.results], ledger, as_json, single, recorded=False)
        if exc.dump is None and not as_json:
            click.echo(json.dumps([r.to_json() for r in exc.results], indent=2, default=str))
        raise


def _report(results: list[Any], ledger: Any, as_json: bool, single: bool, recorded: bool = True) -> None:
    from workbench.measure.model import describe_sets
    from workbench.measure.tables import attempts_table, phases_table

    for r in results:  # loud, on stderr, in every mode: an unstable number must not pass unseen
        if r.warning:
            click.secho(f"{r.label}: {r.warning}", fg="yellow", bold=True, err=True)
        if r.verdict == "failed" or r.cache != r.cache_requested:
            click.secho(f"{r.label}: {r.verdict.upper()}: {r.notes or r.cache}", fg="red", bold=True, err=True)
    reported = sum(r.report.host_memory_reported_mib or 0 for a in results for r in a.runs)
    if reported > 0:
        click.secho(f"note: this machine handed {reported:,.0f} MiB of freed memory back to its hypervisor "
                    "during these runs (virtio-balloon free page reporting); touching it again faults "
                    "through the hypervisor, which slows and scatters load times — see `workbench env`",
                    fg="yellow", err=True)
    if as_json:
        payload = results[0].to_json() if single else [r.to_json() for r in results]
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    for line in describe_sets([r.config.file for r in results]):  # a set: which files, how much
        click.echo(line)
    click.echo(attempts_table(results))
    phases = phases_table(results)
    if phases:
        click.echo(phases)
    click.echo(f"ledger: {ledger.path}" + ("" if recorded else " — NOT all recorded, see the error below"))
