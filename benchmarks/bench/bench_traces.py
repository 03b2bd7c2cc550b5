"""How fast routing traces are read, described and fitted (``workbench trace stats`` / ``fit``), and how
close the fitted traces come, on trace shapes of real MoE models (issue 34 §1).

    python3 benchmarks/bench/bench_traces.py [--repeat 3] [--tokens-scale 1.0] [--shapes mixtral,a3b,e256,phases]
                                       [--out bench_traces.json]

Shapes (seeded Zipf traces, s = 1.2, :func:`workbench.expert.routing.synthetic_trace`, plus one trace
with 200-token phases of its own hot experts, which Zipf traces have not):

* ``mixtral`` — 32 MoE layers, top-2 of 8, 4,000 tokens (the public vLLM Mixtral-8x7B trace's shape);
* ``a3b`` — 48 layers, top-8 of 128, 1,000 tokens (Qwen3-30B-A3B's);
* ``e256`` — 58 layers, top-8 of 256, 500 tokens (DeepSeek-V3's routed experts);
* ``phases`` — 4 layers, top-8 of 64, 4,000 tokens, a new hot set every 200 tokens.

For each: reading the trace from every format (``.csv``, ``.npy`` rows, ``.npy`` [tokens, layers, k],
``.jsonl`` with gates), :func:`trace_stats`, and :func:`fit_trace` (its default comparison: 10,000
synthesized tokens) — process CPU seconds (the median of ``--repeat``; the fit once) with the wall time
beside it, and the fit's gaps against its tolerances. Prints one JSON object with the machine, the date
and the versions, and writes it to ``--out``. Not a timed test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from workbench.expert.routing import synthetic_trace
from workbench.expert.traces import RoutingTrace, as_trace, fit_trace, read_trace, trace_bytes, trace_stats

SHAPES = {"mixtral": (32, 8, 2, 4000), "a3b": (48, 128, 8, 1000), "e256": (58, 256, 8, 500)}


def phases(tokens: int = 4000, n: int = 64, k: int = 8, segment: int = 200, seed: int = 0) -> RoutingTrace:
    rng = np.random.default_rng(seed)
    out = np.empty((tokens, 4, k), np.int32)
    for t0 in range(0, tokens, segment):
        for layer in range(4):
            score = np.log(rng.dirichlet(np.ones(n) * 0.3)) + rng.gumbel(size=(segment, n))
            out[t0:t0 + segment, layer] = np.argpartition(-score, k - 1, axis=1)[:, :k]
    return RoutingTrace(out, (0, 1, 2, 3), n, "phases")


def timed(fn, repeat: int) -> dict:
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_s": round(statistics.median(cpu), 3), "wall_s": round(statistics.median(wall), 3), "n": repeat}


def files(routing: RoutingTrace, folder: Path) -> dict[str, Path]:
    """The trace in every format: rows (csv, npy), the [tokens, layers, k] array, and JSONL with gates."""
    out = {}
    for name in ("rows.csv", "rows.npy"):
        (folder / name).write_bytes(trace_bytes(routing, name))
        out[name] = folder / name
    np.save(folder / "dense.npy", routing.experts)
    out["dense.npy"] = folder / "dense.npy"
    gates = np.sort(np.random.default_rng(0).dirichlet(np.ones(routing.k), size=routing.experts.shape[:2]))[..., ::-1]
    with_gates = RoutingTrace(routing.experts, routing.layers, routing.n_experts, "gates", gates.astype(np.float32))
    (folder / "hook.jsonl").write_bytes(trace_bytes(with_gates, "hook.jsonl"))
    out["hook.jsonl"] = folder / "hook.jsonl"
    return out


def bench_shape(name: str, routing: RoutingTrace, repeat: int, folder: Path) -> dict:
    row: dict = {"shape": name, "tokens": routing.tokens, "layers": len(routing.layers), "k": routing.k,
                 "experts": routing.n_experts, "ids": int(routing.experts.size), "read": {}}
    for fmt, path in files(routing, folder).items():
        row["read"][fmt] = {**timed(lambda: read_trace(path), repeat), "bytes": path.stat().st_size}
    trace = as_trace(routing)
    row["stats"] = timed(lambda: trace_stats(trace), repeat)
    c0, w0 = time.process_time(), time.perf_counter()
    fit = fit_trace(trace, seed=0)
    row["fit"] = {"cpu_s": round(time.process_time() - c0, 2), "wall_s": round(time.perf_counter() - w0, 2), "n": 1,
                  "memory": float(fit.model.memory[0]), "recency": float(fit.model.recency[0]),
                  "stickiness": [round(float(x), 3) for x in (fit.model.stickiness.min(), fit.model.stickiness.max())],
                  "gaps": fit.deviation.round(4).to_dict(orient="records")}
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens-scale", type=float, default=1.0, help="Scale every shape's tokens (a smoke run).")
    parser.add_argument("--shapes", default="mixtral,a3b,e256,phases")
    parser.add_argument("--out", default="bench_traces.json")
    args = parser.parse_args(argv)
    wanted = args.shapes.split(",")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (layers, n, k, tokens) in SHAPES.items():
            if name in wanted:
                routing = synthetic_trace(max(8, int(tokens * args.tokens_scale)), layers, n, k, distribution="zipf",
                                          seed=0)
                rows.append(bench_shape(name, routing, args.repeat, Path(tmp)))
        if "phases" in wanted:
            rows.append(bench_shape("phases", phases(max(200, int(4000 * args.tokens_scale) // 200 * 200)),
                                    args.repeat, Path(tmp)))
    doc = {"machine": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "python": platform.python_version(), "numpy": np.__version__, "started": started,
           "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_average": [round(load, 2), round(os.getloadavg()[0], 2)], "shapes": rows}
    text = json.dumps(doc, indent=1)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
