"""Loads across several ranks (issue 36): each ranked strategy's scaling curve — aggregate GB/s and the
slowest rank against the median — over rank counts, on one model, each point measured by the workbench's
runner (fresh rank processes per run, page-cache state set and checked before each, strategies interleaved
within a rank count, every rank's bytes read back) into a ledger; a Markdown report with machine, date and n.

    python benchmarks/bench/bench_ranks.py --device host --dir /tmp/ranks --size 64MiB --ranks 1,2 --runs 3 --out r.md
    python benchmarks/bench/bench_ranks.py --device cuda --dir /tmp/bench --shape llama3-70b --ranks 2,4,8 \\
        --strategies ranges,shm,scatter --runs 3 --out ranks-h200.md     # a box of 8 GPUs, warm

``--device cuda`` gives each rank a GPU of its own (rank r on cuda:r); ``--device cuda:0`` puts every rank on
one GPU (the single-GPU smoke test: gloo between the ranks, each rank on the cuda backend; NCCL refuses two
ranks on one device). The model is written once (a sharded bf16 safetensors set, 5 GB shards as the Hub
ships them) and reused.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="host")
    p.add_argument("--dir", default="/tmp/ranks")
    p.add_argument("--size", default="64MiB", help="model size (ignored with --shape and no --layers-size)")
    p.add_argument("--shape", default=None, help="llama3-8b | llama3-70b: a real model's full dimensions")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--strategies", default="whole,ranges,shm,scatter",
                   help="comma-separated; a strategy's own params after its name: 'ranges upload=pinned threads=8'")
    p.add_argument("--layout", default="tp", choices=("tp", "ep"))
    p.add_argument("--transport", default="auto", choices=("auto", "gloo", "nccl"))
    p.add_argument("--cache", default="warm", choices=("warm", "cold"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--ledger", default=None)
    p.add_argument("--out", required=True)
    return p.parse_args()


def _model(a: argparse.Namespace) -> str:
    from workbench.formats.synth import parse_size, write_synthetic

    layout = "moe" if a.layout == "ep" else "dense"
    name = f"ranks-{a.shape or a.size}-{layout}"
    path = Path(a.dir) / name
    if not (path / "model.safetensors.index.json").exists():
        t0 = time.monotonic()
        write_synthetic(path, format="safetensors", layout=layout, dtype="bf16", shape=a.shape,
                        size=None if a.shape else parse_size(a.size), max_shard_size=5_000_000_000 if a.shape else None,
                        shards=1 if a.shape else 2)
        print(f"wrote {path} in {time.monotonic() - t0:.0f} s", flush=True)
    return str(path)


def _machine() -> str:
    gpu = ""
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout.strip().replace("\n", ", ")
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{platform.node()} ({os.cpu_count()} CPUs{', ' + gpu if gpu else ''})"


def _name(config) -> str:
    """The strategy with its own params (not the run's: ranks, layout, transport)."""
    own = " ".join(f"{k}={v}" for k, v in sorted(config.params.items()) if k not in ("ranks", "layout", "transport"))
    return f"{config.strategy} {own}".strip()


def _rows(results: list, world: int) -> list[str]:
    rows = []
    for r in results:
        ok = [run for run in r.runs if run.ok and run.report.ranks is not None]
        if not ok:
            why = next((run.error for run in r.runs if run.error), "no run finished")
            rows.append(f"| {world} | {_name(r.config)} | failed: {str(why)[:120]} | | | | | | 0/{len(r.runs)} |")
            continue
        windows = [run.load_s for run in ok]
        held = ok[0].report.ranks.bytes_held
        stragglers = [run.report.ranks.straggler_ratio for run in ok]
        per_rank_read = statistics.median(rk.bytes_read for run in ok for rk in run.report.ranks.ranks)
        per_rank_net = statistics.median(rk.bytes_interconnect for run in ok for rk in run.report.ranks.ranks)
        verified = sum(1 for run in ok if run.verified)
        med = statistics.median(windows)
        rows.append(f"| {world} | {_name(r.config)} | {med * 1e3:.1f} [{min(windows) * 1e3:.1f}–"
                    f"{max(windows) * 1e3:.1f}] | {held / med / 1e9:.2f} | {statistics.median(stragglers):.2f} "
                    f"(max {max(stragglers):.2f}) | {per_rank_read / 1e9:.3f} | {per_rank_net / 1e9:.3f} | "
                    f"{held / 1e9:.3f} | {verified}/{len(r.runs)} |")
    return rows


def main() -> int:
    a = _args()
    from workbench.measure.ranks.runner import measure_ranks
    from workbench.records import RunConfig

    Path(a.dir).mkdir(parents=True, exist_ok=True)
    model = _model(a)
    ledger = a.ledger or str(Path(a.dir) / "ranks.sqlite")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Loads across ranks: {Path(model).name}, {a.layout}, {a.cache}", "",
             f"Machine {_machine()}, {started}, device `{a.device}`, transport {a.transport}, n = {a.runs} runs a "
             f"point (strategies interleaved within a rank count, fresh rank processes per run). Window: first rank's "
             f"start → last rank's bytes on its device (CLOCK_MONOTONIC). GB/s: every rank's bytes together.", "",
             "| ranks | strategy | window ms median [min–max] | aggregate GB/s | slowest/median rank | GB read a rank "
             "| GB interconnect a rank | GB held (all ranks) | verified |",
             "|---|---|---|---|---|---|---|---|---|"]
    for world in [int(x) for x in a.ranks.split(",")]:
        configs = [RunConfig(file=model, strategy=s.split()[0], device=a.device,
                             params={**dict(w.split("=", 1) for w in s.split()[1:]), "ranks": str(world),
                                     "layout": a.layout, "transport": a.transport})
                   for s in a.strategies.split(",")]
        try:
            results = measure_ranks(configs, runs=a.runs, cache=a.cache, ledger=ledger, campaign="ranks",
                                    hypothesis=f"scaling over ranks ({a.layout})", timeout_s=a.timeout)
        except Exception as exc:  # noqa: BLE001 - a refused point (a dim the ranks do not divide) is a row
            lines.append(f"| {world} | all | refused: {str(exc).splitlines()[0][:160]} | | | | | | |")
            continue
        lines += _rows(results, world)
        Path(a.out).write_text("\n".join(lines) + "\n")
        print("\n".join(lines[-len(results):]), flush=True)
    lines += ["", f"Ledger: {ledger} (campaign `ranks`; per-rank rows: `workbench ledger export` → ranks.csv)."]
    Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
