"""Harness benchmark: what the runner itself costs per run, and a 10-config × 5-run sweep.

    python benchmarks/bench/bench_harness.py                       # 1 GiB model in data/models/bench, warm sweep
    python benchmarks/bench/bench_harness.py --dir /data --size 1GiB --cache cold --out report.md

1. Overhead: ``--overhead-runs`` fresh-worker runs of ``pread`` on a small model on the host backend;
   per run, wall (spawn → exit as the parent sees it) minus the load window, split into interpreter
   start, imports, device init, verification and exit, plus the parent's own cost per run (cache
   preparation, lock, ledger write) — the time a sweep spends that no run measures.
2. Sweep: ten configurations (every strategy, some with parameter variants) × ``--runs`` on a
   ``--size`` synthetic model, interleaved, through :func:`workbench.measure.measure`, end to end.

Goals (issue 4): ≤ 1 s overhead per run; the sweep under 2 minutes on 2 cores. Prints Markdown.
A scratch ledger is used; the device lock is the machine's real one, so a sweep by someone else on
this host makes this one wait (recorded as lock wait, outside every run's wall).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.measure.run.attempt import run_overhead  # noqa: E402

SWEEP = [("pread", {}), ("pread", {"evict": "1"}), ("pread", {"upload": "pinned"}), ("willneed", {}),
         ("warmer", {}), ("mmap", {}), ("populate", {}), ("lanes", {}), ("lanes", {"threads": "2"}),
         ("odirect", {})]


def _ms(values: Sequence[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values) * 1e3:.0f} ({min(values) * 1e3:.0f}–{max(values) * 1e3:.0f})"


def _model(directory: Path, size: int, name: str) -> Path:
    path = directory / name
    if not path.exists() or path.stat().st_size < size * 0.9:
        write_synthetic(path, format="gguf", layout="dense", size=size, seed=7)
    return path


def bench_overhead(model: Path, runs: int, ledger: Path) -> list[str]:
    """Per-run harness cost on a small model (host backend, warm, verified)."""
    t0 = time.perf_counter()
    (res,) = measure([RunConfig(str(model), "pread")], runs=runs, cache="warm", ledger=ledger,
                     campaign="bench-overhead")
    elapsed = time.perf_counter() - t0
    ok = [r for r in res.runs if r.ok]
    timing = lambda key: [float(getattr(r.report.timings, key)) for r in ok]  # noqa: E731
    exits = [r.wall_s - float(r.report.timings.startup_s) - float(r.report.timings.total_s)
             for r in ok]
    waited = sum(r.lock_wait_s for r in res.runs)
    parent = (elapsed - sum(r.wall_s or 0.0 for r in res.runs) - waited) / runs
    rows = [
        ("load window", [r.load_s for r in ok]), ("wall (spawn → exit)", [r.wall_s for r in ok]),
        ("**overhead = wall − load**", [run_overhead(r) for r in ok]),
        ("· interpreter start → worker entry", timing("startup_s")),
        ("· imports (workbench, strategy, formats, numpy)", timing("import_s")),
        ("· device init", timing("init_s")), ("· verification (after the window)", timing("verify_s")),
        ("· exit → parent sees it", exits),
    ]
    lines = [f"Model: {model.stat().st_size / 2**20:.1f} MiB GGUF, `pread`, host backend, warm, "
             f"{len(ok)}/{runs} runs ok.", "", "| per run | median ms (min–max) |", "|---|---|"]
    lines += [f"| {name} | {_ms(vals)} |" for name, vals in rows]
    lines += [f"| parent per run beyond the wall (cache prep, lock, ledger write) | {parent * 1e3:.0f} |",
              f"| waiting for the device lock (someone else's runs), per run | {waited / runs * 1e3:.0f} |", ""]
    return lines


def bench_sweep(model: Path, runs: int, cache: str, ledger: Path) -> list[str]:
    """Ten configurations × ``runs``, interleaved, timed end to end."""
    configs = [RunConfig(str(model), name, params) for name, params in SWEEP]
    t0 = time.perf_counter()
    results = measure(configs, runs=runs, cache=cache, ledger=ledger, campaign="bench-sweep")
    elapsed = time.perf_counter() - t0
    all_runs = [r for res in results for r in res.runs]
    overheads = [run_overhead(r) for r in all_runs if r.ok]
    waited = sum(r.lock_wait_s for r in all_runs)
    lines = [f"Model: {model.stat().st_size / 2**30:.2f} GiB GGUF, host backend, cache {cache}, "
             f"{len(configs)} configs × {runs} runs = {len(all_runs)} runs, "
             f"{sum(r.ok for r in all_runs)} ok.", "",
             f"- **sweep wall: {elapsed:.1f} s** ({elapsed / len(all_runs):.2f} s per run)",
             f"- overhead per run (wall − load): median {statistics.median(overheads) * 1e3:.0f} ms, "
             f"max {max(overheads) * 1e3:.0f} ms",
             f"- of which (medians, ms): {_breakdown([r for r in all_runs if r.ok])}",
             f"- parent per run beyond the wall (cache prep, lock, ledger write): "
             f"{(elapsed - sum(r.wall_s or 0 for r in all_runs) - waited) / len(all_runs) * 1e3:.0f} ms",
             f"- waiting for the device lock (someone else's runs), total: {waited:.2f} s", "",
             "| config | median load ms | spread % | GB/s | verdict |", "|---|---|---|---|---|"]
    for res in results:
        s = res.stats
        med = "—" if s.median_s is None else f"{s.median_s * 1e3:.0f}"
        spread = "—" if s.spread_pct is None else f"{s.spread_pct:.1f}"
        gbps = "—" if s.gbps is None else f"{s.gbps:.2f}"
        lines.append(f"| {res.label} | {med} | {spread} | {gbps} | {res.verdict} |")
    return lines + [""]


def _breakdown(runs: Sequence[Any]) -> str:
    """Median ms of each part of wall − load: start-up, imports, init, verification, the rest."""
    parts = {k: [float(getattr(r.report.timings, f"{k}_s")) for r in runs] for k in ("startup", "import", "init", "verify")}
    rest = [run_overhead(r) - sum(float(getattr(r.report.timings, f"{k}_s")) for k in parts) for r in runs]
    named = {**parts, "teardown + exit": rest}
    return ", ".join(f"{k} {statistics.median(v) * 1e3:.0f}" for k, v in named.items())


def _machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    cores = len(os.sched_getaffinity(0))
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{platform.node()}: {cpu}, {cores} cores, {ram:.0f} GiB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="data/models/bench", help="Where the models go (a disk-backed file system).")
    ap.add_argument("--size", default="1GiB", help="Sweep model size.")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--overhead-runs", type=int, default=10)
    ap.add_argument("--cache", default="warm", choices=("cold", "warm", "asis"))
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--out", default=None, help="Also write the Markdown here.")
    args = ap.parse_args(argv)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    ledger = Path(tempfile.mkdtemp(prefix="wb-bench-")) / "ledger.sqlite"
    lines = [f"Machine: {_machine()}", f"Date: {time.strftime('%Y-%m-%d %H:%M %Z')}", "",
             "### Harness overhead per run", ""]
    lines += bench_overhead(_model(directory, 4 << 20, "bench-small.gguf"), args.overhead_runs, ledger)
    if not args.skip_sweep:
        size = parse_size(args.size)
        lines += ["### Sweep", ""]
        lines += bench_sweep(_model(directory, size, f"bench-{args.size}.gguf"), args.runs, args.cache, ledger)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
