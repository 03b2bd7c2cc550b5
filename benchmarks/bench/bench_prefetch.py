"""Route-ahead prefetch as a decode-session A/B: what a predictor of a given accuracy is worth.

    python benchmarks/bench/bench_prefetch.py                               # this CPU box: host backend
    python benchmarks/bench/bench_prefetch.py --device cuda --dir /tmp/bench --size 2GiB --experts 64 \\
        --out docs/benchmarks/prefetch-h200.md                        # the H200 (gpu_session.sh session-prefetch)

One session A/B (ABBA, ``--rounds`` cells an arm, every cell's landed bytes verified after each turn,
untimed) over ``--arms`` (``;``-separated ``--ab`` texts; the first is the baseline): by default
``prefetch=none`` (nothing staged ahead: a layer's misses are read once it is routed), ``prefetch=previous``
(the previous token's experts), ``prefetch=oracle:precision=0.9,recall=0.9`` (a 90 %-accurate predictor)
and ``prefetch=route`` (the routing itself, known ahead: the write-up's route-ahead, a perfect predictor),
all with ``--lanes`` lanes, overlap and ``--compute`` on a model larger than its cache. Per cell: tok/s,
the per-token latency p50/p99 and the per-token stall, and the predictor's precision, recall and MiB a
token read ahead, unused by its layer, never used, and skipped (what it named for layers run on the host
under ``miss=host|auto`` in an arm: their share of the layers asked, and MiB a token not staged). Effects against the baseline: tok/s, token p50/p90/p99,
stall ms/token and stall p99 (ratios with 95 % intervals, paired by round; a p99 says what it rests on).

Prints Markdown (and writes it with ``--out``); every cell is in the ledger (``--ledger``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_session import _ab, _emit, _model  # noqa: E402
from bench_session_report import ab_section, model_line  # noqa: E402
from bench_strategies import _machine  # noqa: E402

from workbench.expert.session import SessionConfig  # noqa: E402
from workbench.formats.synth import parse_size  # noqa: E402
from workbench.ledger import Ledger  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402

ARMS = "prefetch=none;prefetch=previous;prefetch=oracle:precision=0.9,recall=0.9;prefetch=route"
# the command line: flag → (default, what it is); each parses as its default's type
OPTIONS: dict[str, tuple[object, str]] = {
    "--device": ("host", "host | cuda[:n]"), "--dir": ("data/models/bench", "where the model goes (reused when there)"),
    "--size": ("256MiB", "the synthetic GGUF's size"), "--experts": (64, "per layer"),
    "--alignment": (64, "GGUF alignment (64: in-place placement engages)"),
    "--cache-mib": (64.0, "expert cache; the model must be larger"), "--turns": (8, "turns per cell"),
    "--tokens": (4, "decode tokens per turn"), "--rounds": (6, "A/B rounds: cells per arm (6: paired, and a claim)"),
    "--lanes": (4, "reader lanes"), "--compute": ("device", "device (numpy on host, torch/cupy on cuda) | sleep:MS | none"),
    "--cache": ("warm", "page-cache state before each cell: warm | cold | asis"),
    "--distribution": ("uniform", "synthetic routing: uniform | zipf"),
    "--trace": (None, "a routing trace (or a fitted model) instead of synthetic routing"),
    "--arms": (ARMS, "';'-separated --ab texts, the first the baseline"), "--cell-timeout": (300.0, "seconds a cell"),
    "--ledger": (None, "default: a fresh ledger next to the model"), "--out": (None, "also write the Markdown here"),
}
EFFECTS = ["tok/s", "token p50 ms", "token p90 ms", "token p99 ms", "stall ms/token", "stall p99 ms"]


def predictor_rows(result) -> list[str]:
    """Per cell: the figures the effects compare for the tail, and what its predictor did."""
    shown = lambda v: "—" if v < 0 else f"{v:.2f}"  # noqa: E731
    lines = ["", "| cell | arm | round | tok/s | token p50 ms | token p99 ms (n) | stall ms/token | precision | recall | "
                 "read ahead MiB/token | unused by its layer | never used | skipped share | skipped MiB/token |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, ((i, rnd, c), f) in enumerate(zip(result.cells, result.figures)):
        if f is None:
            lines.append(f"| {n + 1} | {result.arms[i].label} | {rnd + 1} | failed: {c.error} |" + " |" * 10)
            continue
        lines.append(f"| {n + 1} `{c.attempt_id[:8]}` | {result.arms[i].label} | {rnd + 1} | {f['tok/s']:.2f} | "
                     f"{f['token p50 ms']:.2f} | {f['token p99 ms']:.2f} ({f['tokens']:.0f}) | {f['stall ms/token']:.2f} | "
                     f"{shown(f['precision'])} | {shown(f['recall'])} | {shown(f['prefetch MiB/token'])} | "
                     f"{shown(f['unused MiB/token'])} | {shown(f['never used MiB/token'])} | "
                     f"{shown(f['skipped share'])} | {shown(f['skipped MiB/token'])} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, (default, say) in OPTIONS.items():
        ap.add_argument(flag, default=default, help=say, type=type(default) if default is not None else None)
    ap.add_argument("--experts-per-token", type=int, default=None, help="default a quarter of the experts, 1-8")
    args = ap.parse_args(argv)

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    model = _model(directory, parse_size(args.size), args.experts, args.alignment)
    ledger = Ledger(args.ledger or directory / f"bench-prefetch-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    t0, env = time.perf_counter(), collect_environment(str(directory))
    base = SessionConfig(turns=args.turns, tokens=args.tokens, cache_mib=args.cache_mib, lanes=args.lanes,
                         overlap=True, compute=args.compute, experts_per_token=args.experts_per_token,
                         distribution=args.distribution, trace=args.trace)
    specs = [s.strip() for s in args.arms.split(";") if s.strip()]
    result = _ab(args, model, ledger, base, specs, args.cache, f"bench-prefetch-{args.device}")
    lines = [f"# Route-ahead prefetch: a decode-session A/B — {args.device}, {model.name}", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {_machine(env, None)}.",
             f"Model: `{model}`: {model_line(model)}. Ledger: `{ledger.path}`.", "",
             f"Base: {args.turns} turns × {args.tokens} tokens per cell, cache {args.cache_mib:g} MiB, lanes {args.lanes}, "
             f"overlap, compute `{args.compute}`, page cache `{args.cache}` before each cell, {args.rounds} rounds (ABBA); "
             f"routing {args.trace or args.distribution}.",
             *predictor_rows(result), *ab_section(result, EFFECTS),
             "", f"Wall time of the benchmark: {time.perf_counter() - t0:.0f} s."]
    _emit(args.out, lines)
    ledger.close()
    return 1 if result.failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
