"""How fast ``workbench trace simulate`` runs: lookups simulated per second, per policy, on trace shapes
of real MoE models (issue 34 §2 asks >= 1 M lookups/s on the 2-core VM).

    python3 benchmarks/bench/bench_simulate.py [--repeat 3] [--tokens-scale 1.0] [--out bench_simulate.json]

Shapes (seeded Zipf traces, s = 1.2: :func:`workbench.expert.routing.synthetic_trace`):

* ``mixtral`` — 32 MoE layers, top-2 of 8, 4,000 tokens (the public vLLM Mixtral-8x7B trace's shape);
* ``a3b`` — 48 layers, top-8 of 128, 1,000 tokens (Qwen3-30B-A3B's);
* ``e256`` — 58 layers, top-8 of 256, 500 tokens (DeepSeek-V3's routed experts).

For each shape and policy two cases: ``one`` — one cache size (half the experts), the policy alone plus
Belady's bound (which every run includes); ``sweep`` — four sizes (1/8, 1/4, 1/2, 3/4 of the experts,
at least k). A lookup is one (token, layer, routed expert) at one cache size; lookups/s counts every
policy run, Belady's included, over the process CPU time of :func:`run_simulation` (the median of
``--repeat``; the wall time beside it: on a shared VM the two part). Prints one JSON object (with
the machine, the date and the Python and NumPy versions) and writes it to ``--out``. Not a timed test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from workbench.expert.policies.simulate import run_simulation
from workbench.expert.routing import synthetic_trace

SHAPES = {"mixtral": (32, 8, 2, 4000), "a3b": (48, 128, 8, 1000), "e256": (58, 256, 8, 500)}
POLICIES = ("lru", "fifo", "lfu", "arc", "static", "belady")


def sizes_for(n_experts: int, k: int, case: str) -> list[int]:
    if case == "one":
        return [max(k, n_experts // 2)]
    return sorted({max(k, int(n_experts * f)) for f in (0.125, 0.25, 0.5, 0.75)})


def measure(trace, policy: str, sizes: list[int], repeat: int) -> dict:
    cpu, wall, lookups = [], [], 0
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        sim = run_simulation(trace, [policy], sizes)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        lookups = sim.lookups
    c, w = statistics.median(cpu), statistics.median(wall)
    return {"sizes": sizes, "lookups": lookups, "cpu_s": round(c, 4), "wall_s": round(w, 4),
            "m_lookups_per_cpu_s": round(lookups / c / 1e6, 3), "m_lookups_per_wall_s": round(lookups / w / 1e6, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens-scale", type=float, default=1.0, help="scale every shape's tokens (a quick run: 0.1)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": platform.node(),
                 "cpu": _cpu_model(), "cores": len(os.sched_getaffinity(0)), "load_avg_1m": os.getloadavg()[0],
                 "python": platform.python_version(), "numpy": np.__version__, "repeat": args.repeat, "cases": []}
    for name, (layers, n_experts, k, tokens) in SHAPES.items():
        trace = synthetic_trace(max(2, int(tokens * args.tokens_scale)), layers, n_experts, k,
                                distribution="zipf", zipf_s=1.2, seed=0)
        for case in ("one", "sweep"):
            for policy in POLICIES:
                row = {"shape": name, "case": case, "policy": policy, "tokens": trace.tokens,
                       **measure(trace, policy, sizes_for(n_experts, k, case), args.repeat)}
                out["cases"].append(row)
                print(f"{name:8} {case:6} {policy:7} {row['m_lookups_per_cpu_s']:7.2f} M lookups/cpu-s "
                      f"({row['m_lookups_per_wall_s']:.2f} wall)", flush=True)
    out["load_avg_1m_end"] = os.getloadavg()[0]
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
