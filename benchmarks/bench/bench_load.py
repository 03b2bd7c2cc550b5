"""Issue 11's benchmark in one command: an 8B-shaped bf16 safetensors file, this machine's walls, every
workbench strategy and every registered peer, cold and warm, and GB/s against reader threads.

    python3 benchmarks/bench/bench_load.py --device cuda --dir /tmp/bench --budget-s 510      # the H200
    python3 benchmarks/bench/bench_load.py --device host --size 256MiB --shape none --budget-s 600  # a dry run

In order, each step only if what is left of ``--budget-s`` covers its estimate (else it is cut from
the end of its list, and the output says what was left out and why):

1. the file (``synth --format safetensors --layout dense --dtype bf16 --shape llama3-8b``; kept and
   reused when already there), fsynced, and its reference checksums;
2. the walls: ``measure_ceilings`` on a scratch file plus the whole model file read cold and warm;
3. warm: ``ring`` (and its variants ``provision=background`` and ``staging=wc``: write-combined slots)
   and every peer (``kind: peer`` in the registry; ``--peer`` adds variants) — fresh
   process per run, cache state set and checked with mincore before every run, interleaved, every
   device byte read back and compared with the file; then ``ring`` at 1, 2, 4, 8, 16 reader threads;
   then ``ring`` and every peer cold;
4. ``mmap register=1``, the ring at 8 and 2 MiB slots and ``lanes upload=pinned threads=8``, warm;
   ``mmap register=1`` and ``lanes upload=pinned threads=8`` cold;
5. every other workbench strategy at its defaults, ``pread upload=pinned``, ``mmap gate=0.9`` and
   ``--extra``, warm, then cold.

Writes into ``--out`` (default: DIR/results-<date>): the ledger, its CSV export, ``bench.md`` (the
tables: GB/s, % of the wall that bounds it, the ratio to the best peer with its interval, spread) and
``bench.json``; prints ``bench.md`` at the end.
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.formats import open_index  # noqa: E402
from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.strategies import STRATEGIES  # noqa: E402

import load_tables  # noqa: E402  (benchmarks/bench/load_tables.py: the session and its rows)
from load_tables import kind_of  # noqa: E402

# The goal's rows first: ring against every peer ("PEERS"), warm and cold; then the best existing
# paths and the ring's slot sizes (they tell the default: GIL-held Python per window against pinned
# memory provisioned per load); then every other strategy.
CORE = ("ring", "PEERS")
# rows the warm group runs right after a core row; bench.md compares each with it (variants_table)
WARM_ONLY = {"ring": ("ring provision=background", "ring staging=wc")}
MORE_WARM = ("mmap register=1", "ring slot_mib=4", "ring slot_mib=2", "lanes upload=pinned threads=8")
MORE_COLD = ("mmap register=1", "lanes upload=pinned threads=8")
VARIANTS = ("pread upload=pinned", "mmap gate=0.9")
THREADS = (1, 2, 4, 8, 16)
RESERVE_S = 20.0  # kept back for the tables and the export


@dataclass(frozen=True)
class Group:
    """One interleaved measurement: these specs, ``runs`` each, in one cache state."""

    name: str
    cache: str
    specs: tuple[str, ...]
    runs: int


class OverBudget(Exception):
    """Raised from the progress callback once the budget is spent: the group in flight stops.
    ``run_group`` fills in what had finished by then: ``done`` of ``total`` runs, and per config
    (the group's order) the result of its runs so far, or None where none ran."""

    done: int = 0
    total: int = 0
    results: tuple[Any, ...] | list[Any] = ()


@dataclass
class Budget:
    """Seconds left, and per-run costs: priors from the walls, replaced by what was measured — the
    overhead per run by cache state (process, device init, verification, cache preparation) and the
    load time per spec and cache state."""

    seconds: float
    nbytes: int
    t0: float = field(default_factory=time.perf_counter)
    overhead: dict[str, float] = field(default_factory=dict)
    loads: dict[tuple[str, str], float] = field(default_factory=dict)
    walls: dict[str, float] = field(default_factory=dict)

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0) - RESERVE_S

    def check(self) -> None:
        if time.perf_counter() - self.t0 > self.seconds - RESERVE_S / 2:
            raise OverBudget(f"budget of {self.seconds:.0f} s spent")

    def run_s(self, spec: str, cache: str) -> float:
        """One run's estimated cost: measured if it ran, else a prior from the walls."""
        load = self.loads.get((spec, cache))
        if load is None:
            load = self.nbytes / 1e9 / self._rate(spec, cache)
        prior = 1.5 + self.nbytes / 5e9 + (0.5 if cache == "cold" else 0.0)  # start + init + verify (+ drop)
        return load + self.overhead.get(cache, self.overhead.get("warm", prior))

    def _rate(self, spec: str, cache: str) -> float:
        """GB/s guessed for a configuration not measured yet (pessimistic on purpose)."""
        w = self.walls
        best = lambda prefix: max((g for n, g in w.items() if n.startswith(prefix)), default=None)  # noqa: E731
        if cache == "cold" or "odirect" in spec or "evict=1" in spec:
            return 0.8 * (best("cold_read_file_") or best("cold_read_") or 1.0)
        if kind_of(spec) == "peer":
            return 1.2  # the slowest peer issue 11 measured warm
        if spec.startswith("ring"):
            t = int(spec.split("threads=")[1].split()[0]) if "threads=" in spec else 16
            return 0.5 * (w.get(f"page_cache_read_{t}t") or best("page_cache_read_") or 2.0)
        if "register=1" in spec or "upload=pinned" in spec:
            return 0.3 * (best("h2d_") or 2.0)
        return 0.3 * (w.get("page_cache_read_1t") or 2.0)

    def fit(self, group: Group) -> tuple[Group, list[str]]:
        """The group cut from the end until its estimate fits; what was cut."""
        specs, cut = list(group.specs), []
        while specs and self.estimate(replace(group, specs=tuple(specs))) > self.left():
            cut.append(specs.pop())
        return replace(group, specs=tuple(specs)), cut

    def estimate(self, group: Group) -> float:
        return sum(self.run_s(s, group.cache) for s in group.specs) * group.runs

    def learn(self, group: Group, results: list[Any], elapsed: list[float]) -> None:
        for res, spec in zip(results, group.specs):
            if res.stats.median_s is not None:
                self.loads[(spec, group.cache)] = res.stats.median_s
        runs = sorted((r for res in results for r in res.runs), key=lambda r: r.position)
        loads = [r.load_s or 0.0 for r in runs]
        if loads and len(elapsed) == len(loads):
            self.overhead[group.cache] = statistics.median(e - x for e, x in zip(elapsed, loads))


def peer_specs(extra: list[str], index: Any = None, backend: str = "") -> tuple[list[str], list[str]]:
    """Specs of the registered peers (``kind == "peer"``) that are available here — and, given the
    file's index and the backend, that can load it there (InstantTensor: CUDA only) — each at the
    library's defaults and, where it has a ``direct`` parameter, buffered too (three of them read with
    O_DIRECT by default, so their warm rows never touch the page cache); then ``extra``; and one line
    for each peer that cannot run."""
    specs, missing = [], []
    for name in STRATEGIES:
        try:
            cls = STRATEGIES.get(name)
        except ImportError as exc:
            missing.append(f"{name}: module missing ({exc})")
            continue
        if getattr(cls, "kind", "") != "peer":
            continue
        avail = cls.available()
        if avail and index is not None and hasattr(cls, "fits"):
            avail = cls().fits(index, backend)
        if not avail:
            missing.append(f"{name}: {avail.reason}")
            continue
        specs.append(name)
        if "direct" in cls.param_defaults():
            specs.append(f"{name} direct=0")
    return specs + [s for s in extra if s not in specs], missing


def workbench_specs(extra: list[str]) -> list[str]:
    """Every non-peer strategy at its defaults, the notable variants, then ``extra``."""
    names = []
    for name in STRATEGIES:
        try:
            if getattr(STRATEGIES.get(name), "kind", "") != "peer":
                names.append(name)
        except ImportError:
            continue
    return names + list(VARIANTS) + list(extra)


GROUPS = ("warm", "threads", "cold", "warm-more", "cold-more", "warm-rest", "cold-rest")  # run in this order


def plan(peers: list[str], extra: list[str], runs: int, scaling_runs: int, threads: tuple[int, ...],
         wanted: tuple[str, ...] = GROUPS) -> list[Group]:
    """The groups in priority order: ring against every peer warm, the thread sweep, the same cold,
    the best existing paths and the ring's slot sizes, then every other workbench strategy."""
    core = tuple(s for c in CORE for s in (peers if c == "PEERS" else [c]))
    seen = set(core) | set(MORE_WARM)
    rest = tuple(s for s in workbench_specs(extra) if s not in seen)
    warm = tuple(x for s in core for x in (s, *WARM_ONLY.get(s, ())))
    groups = [Group("warm", "warm", warm, runs),
              Group("threads", "warm", tuple(f"ring threads={t}" for t in threads), scaling_runs),
              Group("cold", "cold", core, runs), Group("warm-more", "warm", MORE_WARM, runs),
              Group("cold-more", "cold", MORE_COLD, runs), Group("warm-rest", "warm", rest, runs),
              Group("cold-rest", "cold", rest, runs)]
    return [g for g in groups if g.name in wanted]


def make_model(directory: Path, size: int, shape: str | None) -> tuple[Path, float]:
    """The bf16 model file (reused when a complete one is there), fsynced; and seconds spent."""
    name = f"bench-{shape or 'dense'}-bf16-{size >> 20}MiB.safetensors"
    path, t0 = directory / name, time.perf_counter()
    if not path.exists():
        write_synthetic(path, format="safetensors", layout="dense", size=size, dtype="bf16", shape=shape, seed=11)
    fd = os.open(path, os.O_RDONLY)
    try:  # dirty pages cannot be evicted: every cold run needs the file on disk
        os.fsync(fd)
    finally:
        os.close(fd)
    return path, time.perf_counter() - t0


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"lanes upload=pinned threads=8"`` → ("lanes", {"upload": "pinned", "threads": "8"})."""
    name, *pairs = shlex.split(spec)
    return name, dict(p.split("=", 1) for p in pairs)


def run_group(group: Group, model: Path, device: str, ledger: Any, budget: Budget,
              say: Callable[[str], None]) -> tuple[list[Any], list[float]]:
    """Measure one group; the results and each run's elapsed seconds (preparation included).
    Raises OverBudget (after the run in flight) once the budget is spent, with each config's result
    from the runs that finished (``partial_result``)."""
    configs = [RunConfig(str(model), *parse_spec(spec), device=device, label=spec) for spec in group.specs]
    marks = [time.perf_counter()]
    finished: list[list[Any]] = [[] for _ in configs]  # each config's runs so far, for a stop mid-way
    count = [0, 0]  # done, total

    def progress(done: int, total: int, config: RunConfig, run: Any) -> None:
        marks.append(time.perf_counter())
        finished[next(i for i, c in enumerate(configs) if c is config)].append(run)
        count[:] = [done, total]
        last = str(run.error).strip().splitlines()[-1][:100] if run.error else ""
        took = f"FAILED {last}" if run.error else f"{run.load_s * 1e3:.0f} ms"
        say(f"{group.name} {done}/{total} {config.display}: {took} (resident before {run.resident_before})")
        if done < total:
            budget.check()

    try:
        results = measure(configs, runs=group.runs, cache=group.cache, ledger=ledger, labels=list(group.specs),
                          campaign=f"load-{group.name}", hypothesis="issue 11: the fast warm path and peers",
                          progress=progress, timeout_s=90.0)
    except OverBudget as exc:  # the runner closed the attempts as interrupted, their runs kept
        exc.done, exc.total = count
        exc.results = [partial_result(c, runs, group.cache, ledger) if runs else None
                       for c, runs in zip(configs, finished)]
        raise
    return results, [b - a for a, b in zip(marks, marks[1:])]


def partial_result(config: RunConfig, runs: list[Any], cache: str, ledger: Any) -> Any:
    """What ``measure`` returns for a config, from the runs it finished before the group stopped:
    the same statistics and bounding wall; the verdict the ledger holds (failed: interrupted)."""
    from workbench.measure.run.attempt import AttemptResult, cache_label, effective_state
    from workbench.measure.ceilings.bounds import bounding_ceiling, host_ceilings
    from workbench.measure.run.stats import summarize

    stats = summarize(runs, max((r.bytes for r in runs if r.ok), default=0))
    label = cache_label(cache, runs)
    first = next((r for r in runs if r.ok), None)
    path = first.report.load.path if first is not None and first.report.load is not None else None
    wall = bounding_ceiling(host_ceilings(ledger), effective_state(label, runs), config.device, path)
    name, gbps = wall if wall else (None, None)
    return AttemptResult(attempt_id="", config=config, cache=label, runs=tuple(runs), stats=stats,
                         baseline_id=None, speedup=None, verdict="failed", verdict_reason="interrupted",
                         ceiling_name=name, ceiling_gbps=gbps,
                         ceiling_fraction=stats.gbps / gbps if gbps and stats.gbps else None,
                         label=config.label, cache_requested=cache)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dir", default="data/models/bench", help="the model, scratch files and results go here")
    ap.add_argument("--size", default="8GiB")
    ap.add_argument("--shape", default="llama3-8b", help="llama3-8b, or none for the synth's ladder (small files)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scaling-runs", type=int, default=3)
    ap.add_argument("--threads", default=",".join(map(str, THREADS)), help="reader threads for the scaling rows")
    ap.add_argument("--ceiling-size", default="1GiB")
    ap.add_argument("--file-threads", default="8,16", help="readers for the whole-file walls")
    ap.add_argument("--budget-s", type=float, default=510.0, help="stop planning new steps past this")
    ap.add_argument("--peer", action="append", default=[], help="an extra peer row, e.g. 'peer-x opt=1'")
    ap.add_argument("--extra", action="append", default=[], help="an extra workbench row")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"which of {', '.join(GROUPS)} to run")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = lambda msg: print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    t_start = time.perf_counter()
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    out = Path(args.out or directory / f"results-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    shape = None if args.shape == "none" else args.shape
    model, made_s = make_model(directory, parse_size(args.size), shape)
    say(f"model {model} ({model.stat().st_size / 1e9:.2f} GB) ready in {made_s:.1f} s")
    session = load_tables.Session.start(args, model, out, made_s, say)
    budget = Budget(args.budget_s, session.nbytes, t0=t_start, walls=session.walls)
    peers, session.unavailable = peer_specs(args.peer, open_index(str(model)), args.device.partition(":")[0])
    threads = tuple(int(t) for t in args.threads.split(","))
    wanted = tuple(args.groups.split(","))
    groups = plan(peers, args.extra, args.runs, args.scaling_runs, threads, wanted)
    session.cut += [f"{name}: not asked for (--groups)" for name in GROUPS if name not in wanted]
    say(f"plan: {', '.join(f'{g.name} ~{budget.estimate(g):.0f} s' for g in groups)}; "
        f"{budget.left():.0f} s left of the budget")
    for group in groups:
        if not _measure_group(group, model, args.device, session, budget, say):
            break
    session.finish(time.perf_counter() - t_start)
    print(session.rendered)
    return 0


def _measure_group(group: Group, model: Path, device: str, session: Any, budget: Budget,
                   say: Callable[[str], None]) -> bool:
    """Fit, run, learn, record; False once the budget is spent."""
    fitted, cut = budget.fit(group)
    session.note_cut(group, cut[::-1], budget)
    if not fitted.specs:
        return True
    say(f"{group.name}: {len(fitted.specs)} configs x {fitted.runs} runs, {group.cache} "
        f"(~{budget.estimate(fitted):.0f} s, {budget.left():.0f} s left)")
    try:
        results, elapsed = run_group(fitted, model, device, session.ledger, budget, say)
    except OverBudget as exc:  # the runs that finished still make the group's table, marked as stopped
        ran = [(spec, res) for spec, res in zip(fitted.specs, exc.results) if res is not None]
        session.add(replace(fitted, specs=tuple(spec for spec, _ in ran)), [res for _, res in ran])
        none = [spec for spec, res in zip(fitted.specs, exc.results) if res is None]
        session.cut.append(f"{group.name}: stopped mid-way after {exc.done}/{exc.total} runs, {exc} (its table "
                           f"shows the runs that finished; the ledger holds its attempts as interrupted)"
                           + (f"; no run of {', '.join(none)}" if none else ""))
        return False
    budget.learn(fitted, results, elapsed)
    session.add(fitted, results)
    session.write()
    return True


if __name__ == "__main__":
    sys.exit(main())
