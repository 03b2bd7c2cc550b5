"""The expert path at the wall (issue 20 §5): ``experts`` against ``ring`` on the 2 GiB A3B-like GGUF, what
the staging costs (provisioning in the window, write-combined slots, a ring sized to a small model), and
cold against the disk — in one command:

    python3 benchmarks/bench/bench_expert_path.py --device cuda --dir /tmp/bench --out OUT.md        # the H200
    python3 benchmarks/bench/bench_expert_path.py --device host --size 256MiB --small-size 16MiB --runs 6  # a VM

Groups, in order, each interleaved (round k = the k-th run of every configuration), fresh worker
processes, cache state set and checked before every run, every device byte read back:

1. ``warm``: ``ring`` and ``experts`` (staged) at their defaults, each with ``provision=background`` and
   ``staging=wc`` — the goal (``experts`` ≥ 0.9 × ``ring``, ``ring`` ≥ 30 GB/s) and what provisioning
   and write-combined slots change, each pair a ratio of medians with its bootstrap interval;
2. ``small``: a small MoE model (``--small-size``): ``experts sized=0`` (20 × 8 MiB of pinned slots
   whatever the model) against the sized ring, and ``provision=background``;
3. ``cold``: ``ring`` and ``experts`` (each also ``provision=background``: the disk leaves time to
   provision beside the reads) against the best disk read of this run's ceilings (goal ≥ 0.95×).

Writes Markdown (``--out``, rewritten after every group so a cut-off run keeps its part) and prints it.
The model is the one ``bench_experts.py`` writes (same name, reused), so both benchmarks read one file.
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workbench.formats import open_index  # noqa: E402
from workbench.formats.synth import parse_size  # noqa: E402
from workbench.ledger import Ledger  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.measure.ceilings.walls import measure_ceilings  # noqa: E402
from workbench.measure.run.effect import ratio_effect  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402
from workbench.records import format_effect  # noqa: E402

from bench_experts import _model, _shape  # noqa: E402
from bench_strategies import _ceiling_lines, _machine  # noqa: E402

WARM = ("ring", "experts", "ring provision=background", "experts provision=background", "ring staging=wc",
        "experts staging=wc")
WARM_PAIRS = (("experts vs ring (goal >= 0.9x)", "ring", "experts"),
              ("ring: provision background vs upfront", "ring", "ring provision=background"),
              ("experts: provision background vs upfront", "experts", "experts provision=background"),
              ("ring: staging wc vs default", "ring", "ring staging=wc"),
              ("experts: staging wc vs default", "experts", "experts staging=wc"))
SMALL = ("experts sized=0", "experts", "experts provision=background", "ring")
SMALL_PAIRS = (("experts: sized vs unsized ring", "experts sized=0", "experts"),
               ("experts: background vs upfront (sized)", "experts", "experts provision=background"),
               ("experts vs ring", "ring", "experts"))
COLD = ("ring", "experts", "ring provision=background", "experts provision=background")
COLD_PAIRS = (("experts vs ring, cold", "ring", "experts"),
              ("ring: provision background vs upfront, cold", "ring", "ring provision=background"),
              ("experts: provision background vs upfront, cold", "experts", "experts provision=background"))
GROUPS = ("warm", "small", "cold")
RING_GOAL_GBPS, EXPERTS_GOAL, COLD_GOAL = 30.0, 0.9, 0.95


def spec_config(spec: str, model: Path, device: str) -> RunConfig:
    name, *pairs = shlex.split(spec)
    return RunConfig(str(model), name, dict(p.split("=", 1) for p in pairs), device, label=spec)


def _say(done: int, total: int, config: RunConfig, run) -> None:
    took = "FAILED " + str(run.error).strip().splitlines()[-1][:100] if run.error else f"{run.load_s * 1e3:.0f} ms"
    print(f"[bench] {done}/{total} {config.label}: {took}", file=sys.stderr, flush=True)


def times(a) -> list[float]:
    return [r.load_s for r in a.runs if r.ok]


def phase_ms(a, name: str) -> str:
    values = [r.phases.get(name, 0.0) for r in a.runs if r.ok]
    return f"{statistics.median(values) * 1e3:.1f}" if values else "—"


def bootstrap_ratio(seconds: list[float], wall_s: float, seed: int = 0) -> tuple[float, float, float]:
    """``wall_s / median(seconds)`` (the share of the wall reached) with a 95 % bootstrap interval."""
    arr = np.asarray(seconds, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(arr, size=(4000, arr.size), replace=True), axis=1)
    return wall_s / float(np.median(arr)), float(np.percentile(wall_s / meds, 2.5)), float(np.percentile(wall_s / meds, 97.5))


def group_table(results: list, nbytes: int) -> list[str]:
    lines = ["| configuration | n | median ms (min–max) | GB/s | staging ms | read ms | sync ms | wall (share) | "
             "engaged |", "|---|---|---|---|---|---|---|---|---|"]
    for a in results:
        t = times(a)
        if not t:
            err = next((r.error for r in a.runs if r.error), "no run")
            lines.append(f"| `{a.label}` | 0 | failed: {str(err).strip().splitlines()[-1][:120]} | | | | | | |")
            continue
        wall = f"{a.ceiling_name} {a.ceiling_gbps:.2f} ({a.ceiling_fraction:.0%})" if a.ceiling_gbps else "—"
        ok = next(r for r in a.runs if r.ok)
        facts = "; ".join(e for e in ok.engaged if e.split(":")[0] in
                          ("staged_readers", "ring_readers", "pinned_staging", "write_combined"))
        lines.append(f"| `{a.label}` | {len(t)} | {statistics.median(t) * 1e3:,.1f} ({min(t) * 1e3:,.1f}–"
                     f"{max(t) * 1e3:,.1f}) | {nbytes / statistics.median(t) / 1e9:.2f} | {phase_ms(a, 'staging')} | "
                     f"{phase_ms(a, 'read')} | {phase_ms(a, 'sync')} | {wall} | {facts} |")
    return lines


def staging_s(a) -> list[float]:
    """Each run's staging phase (provisioning and releasing pinned slots inside the window), >= 1 µs."""
    return [max(r.phases.get("staging", 0.0), 1e-6) for r in a.runs if r.ok]


def pair_lines(results: list, pairs: tuple) -> tuple[list[str], dict]:
    """Each pair's effect on the load window and on its staging phase (what provisioning cost in it)."""
    by = {a.label: a for a in results}
    lines = ["", "| pair (paired rounds) | load window: candidate's speedup [95 % interval] | verdict | "
             "staging phase: speedup [95 % interval] | verdict |", "|---|---|---|---|---|"]
    effects = {}
    for name, base, cand in pairs:
        if base not in by or cand not in by:
            continue
        e = ratio_effect(times(by[base]), times(by[cand]), paired=True)
        st = ratio_effect(staging_s(by[base]), staging_s(by[cand]), paired=True)
        effects[name] = e
        lines.append(f"| {name} | {format_effect(e.speedup, e.ci_low, e.ci_high)} | {e.verdict} ({e.reason}) | "
                     f"{format_effect(st.speedup, st.ci_low, st.ci_high)} | {st.verdict} |")
    return lines, effects


def run_group(name: str, specs: tuple, model: Path, args, ledger: Ledger, cache: str) -> list:
    configs = [spec_config(s, model, args.device) for s in specs]
    return measure(configs, runs=args.runs, cache=cache, ledger=ledger, progress=_say, timeout_s=120.0,
                   campaign=f"expert-path-{name}", hypothesis="issue 20 §5: the expert path at the dense path's speed")


def goals(warm: list | None, warm_fx: dict, cold: list | None, walls, nbytes: int) -> list[str]:
    out = ["", "## Against the goals", ""]
    by = {a.label: a for a in warm or []}
    if "ring" in by and times(by["ring"]):
        t = times(by["ring"])
        gb, lo, hi = bootstrap_ratio(t, nbytes / 1e9)  # nbytes/1e9 / seconds = GB/s
        verdict = "met" if lo >= RING_GOAL_GBPS else "missed" if hi < RING_GOAL_GBPS else "not settled"
        out.append(f"- `ring` warm ≥ {RING_GOAL_GBPS:g} GB/s: **{gb:.1f} GB/s [{lo:.1f}–{hi:.1f}]**, {verdict} (n = {len(t)}).")
    e = warm_fx.get(WARM_PAIRS[0][0])
    if e is not None and e.speedup is not None:
        lo = e.ci_low if e.ci_low is not None else e.speedup
        verdict = "met" if lo >= EXPERTS_GOAL else "missed" if (e.ci_high or e.speedup) < EXPERTS_GOAL else "not settled"
        out.append(f"- `experts` ≥ {EXPERTS_GOAL}× `ring` warm: **{format_effect(e.speedup, e.ci_low, e.ci_high)}**, {verdict}.")
    disk = max((c.gbps for c in walls.ceilings if c.name.startswith("cold_read")), default=None) if walls else None
    for a in cold or []:
        t = times(a)
        if t and disk:
            r, lo, hi = bootstrap_ratio(t, nbytes / 1e9 / disk)
            verdict = "met" if lo >= COLD_GOAL else "missed" if hi < COLD_GOAL else "not settled"
            out.append(f"- `{a.label}` cold ≥ {COLD_GOAL}× the best disk read of this run ({disk:.2f} GB/s): "
                       f"**{r:.2f}× [{lo:.2f}–{hi:.2f}]**, {verdict} (n = {len(t)}).")
    return out


def emit(out: str | None, lines: list[str]) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dir", default="data/models/bench")
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--small-size", default="64MiB", help="the small model of the 'small' group")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--ceiling-size", default="1GiB")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"which of {', '.join(GROUPS)}")
    ap.add_argument("--ledger", default=None)
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    model = _model(directory, parse_size(args.size), args.experts)
    nbytes = open_index(model).nbytes
    ledger = Ledger(args.ledger or directory / f"expert-path-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    wanted, env, t0 = args.groups.split(","), collect_environment(str(directory)), time.perf_counter()
    walls = (measure_ceilings(directory, devices=(args.device,), size=parse_size(args.ceiling_size), ledger=ledger)
             if "cold" in wanted else None)
    lines = [f"# The expert path at the wall — {args.device}, {model.name}", "",
             f"Date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. File `{model}` "
             f"({nbytes / 2**30:.2f} GiB of tensors): {_shape(model)}. {args.runs} runs per configuration, "
             f"interleaved; device bytes verified after every run. Ledger `{ledger.path}`.", ""]
    if walls is not None:
        lines += ["## Walls (this run)", "", *_ceiling_lines(walls), ""]
    warm = cold = None
    warm_fx: dict = {}
    if "warm" in wanted:
        warm = run_group("warm", WARM, model, args, ledger, "warm")
        pairs, warm_fx = pair_lines(warm, WARM_PAIRS)
        lines += ["## Warm", "", *group_table(warm, nbytes), *pairs, ""]
        emit(args.out, lines)
    if "small" in wanted:
        small = _model(directory, parse_size(args.small_size), 8)
        small_bytes = open_index(small).nbytes
        res = run_group("small", SMALL, small, args, ledger, "warm")
        pairs, _ = pair_lines(res, SMALL_PAIRS)
        lines += [f"## A small model, warm — `{small.name}` ({small_bytes / 2**20:.1f} MiB of tensors)", "",
                  *group_table(res, small_bytes), *pairs, ""]
        emit(args.out, lines)
    if "cold" in wanted:
        cold = run_group("cold", COLD, model, args, ledger, "cold")
        pairs, _ = pair_lines(cold, COLD_PAIRS)
        lines += ["## Cold", "", *group_table(cold, nbytes), *pairs, ""]
    ok = next((r for a in (warm or cold or []) for r in a.runs if r.ok), None)
    lines.insert(3, f"Machine: {_machine(env, dict(ok.report.device_info) if ok else None)}; "
                    f"wall {time.perf_counter() - t0:.0f} s.")
    lines += goals(warm, warm_fx, cold, walls, nbytes)
    emit(args.out, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
