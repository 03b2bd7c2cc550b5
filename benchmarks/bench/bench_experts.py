"""MoE expert benchmark: the two write-ups' fast paths on an A3B-like synthetic MoE GGUF (alignment 64).

    python benchmarks/bench/bench_experts.py                                   # host, 2 GiB, 64 experts
    python benchmarks/bench/bench_experts.py --device cuda --size 4GiB --experts 128 --out docs/benchmarks/x.md

1. The machine's ceilings (``measure_ceilings``), so every attempt is read against the wall that bounds it.
2. Loads, cold and warm, ``--runs`` fresh worker processes per configuration, all four interleaved
   (round k = the k-th run of each), device bytes verified after every run: ``pread granularity=expert``
   (the first write-up's ~28 s per-expert sweep) vs ``experts`` (one borrowed copy per blob), and
   ``odirect mode=bounce`` vs ``mode=inplace`` (the second write-up). Each pair's effect is the ratio of
   medians with a bootstrap interval over its rounds (``measure/run/effect.py``).
3. A long session of ``--turns`` turns with boundary release off and on (ABBA: off, on, on, off), each
   session in its own worker: unreleased pages and the process's unaccounted anonymous memory turn by
   turn, and the effect of the fix on turn time (first turns, which fill the cache, left out).

Prints Markdown (and writes it with ``--out``), rewritten after every phase so a cut-off run keeps its part.
``--parts ceilings,loads`` then ``--parts session`` with the same ``--ledger`` splits it into two commands
(the walls recorded by the first bound the attempts of the second).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.expert.session import SessionConfig  # noqa: E402
from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.ledger import Ledger  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.measure.ceilings.walls import measure_ceilings  # noqa: E402
from workbench.measure.run.effect import ratio_effect  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402
from workbench.measure.session.runner import measure_session  # noqa: E402
from workbench.records import format_effect  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_strategies import _ceiling_lines, _machine  # noqa: E402

CONFIGS = [("per-expert pread", "pread", {"granularity": "expert"}), ("experts", "experts", {"upload": "pageable"}),
           ("odirect bounce", "odirect", {"mode": "bounce"}), ("odirect inplace", "odirect", {"mode": "inplace"})]
PAIRS = [("experts vs per-expert pread", 0, 1), ("odirect inplace vs bounce", 2, 3)]


def _model(directory: Path, size: int, experts: int) -> Path:
    path = directory / f"bench-a3b-a64-e{experts}-{size >> 20}MiB.gguf"
    if not path.exists() or abs(path.stat().st_size - size) > size * 0.1:
        write_synthetic(path, format="gguf", layout="moe", size=size, experts=experts, alignment=64, seed=11)
    return path


def _shape(path: Path) -> str:
    from workbench.formats import open_index

    index = open_index(path)
    meta = dict(index.metadata)
    blob = index.blobs[0]
    return (f"{len({b.layer for b in index.blobs})} MoE layers × {len(index.blobs) // len({b.layer for b in index.blobs})}"
            f" blobs × {blob.n_experts} experts of {blob.stride:,} B ({blob.stride // 4096} pages; hidden "
            f"{meta.get('qwen2moe.embedding_length')}, expert FFN {meta.get('qwen2moe.expert_feed_forward_length')}),"
            f" blob offsets mod 4096 all multiples of 64: {all(b.offset % 4096 % 64 == 0 for b in index.blobs)}")


def _say(done: int, total: int, config: RunConfig, run) -> None:
    took = "FAILED " + str(run.error)[:80] if run.error else f"{run.load_s * 1e3:.0f} ms"
    print(f"[bench] {done}/{total} {config.label}: {took}", file=sys.stderr, flush=True)


def _phase(a) -> str:
    """The phase that took most of the median run's window."""
    runs = sorted((r for r in a.runs if r.ok), key=lambda r: r.load_s)
    if not runs:
        return "—"
    phases = {k: v for k, v in runs[len(runs) // 2].phases.items() if k != "index"}
    name = max(phases, key=phases.get)
    return f"{name} {phases[name] * 1e3:.0f} ms"


def _handed_back(a) -> str:
    """Median MiB the VM handed back to its hypervisor around a run (free page reporting): memory the next
    first touch faults in slowly — on such a machine a confounder of every fresh buffer."""
    values = [r.report.host_memory_reported_mib for r in a.runs if r.report.host_memory_reported_mib is not None]
    return f"{statistics.median(values):,.0f} MiB" if values else "—"


def _load_section(cache: str, results: list) -> list[str]:
    lines = [f"### {cache}", "", "| configuration | median | spread | n | GB/s | wall (share of it) | "
             "longest phase | memory handed back | engaged |", "|---|---|---|---|---|---|---|---|---|"]
    for a in results:
        s = a.stats
        wall = f"{a.ceiling_name} {a.ceiling_gbps:.2f} GB/s ({a.ceiling_fraction:.0%})" if a.ceiling_gbps else "—"
        ok = next((r for r in a.runs if r.ok), None)
        facts = "; ".join(e.split(" (")[0] for e in ok.engaged) if ok else "—"
        lines.append(f"| {a.label} | {s.median_s * 1e3:,.0f} ms | {s.spread_pct:.1f} % | {s.n} | {s.gbps:.2f} | "
                     f"{wall} | {_phase(a)} | {_handed_back(a)} | {facts} |")
    lines += ["", "| pair | effect (speedup [95 % interval]) | verdict |", "|---|---|---|"]
    for name, base, cand in PAIRS:
        effect = ratio_effect([r.load_s for r in results[base].runs if r.ok],
                              [r.load_s for r in results[cand].runs if r.ok], paired=True)
        lines.append(f"| {name} | {format_effect(effect.speedup, effect.ci_low, effect.ci_high)} | "
                     f"{effect.verdict} ({effect.reason}; {effect.method or 'no resampling'}) |")
    return lines


def _sessions(args, model: Path, ledger: Ledger) -> list[str]:
    config = SessionConfig(turns=args.turns, tokens=args.tokens, cache_mib=args.cache_mib,
                           experts_per_token=args.experts_per_token, placement="inplace")
    rows, seconds = [], {"off": [], "on": []}
    for release in ("off", "on", "on", "off"):
        cfg = dataclasses.replace(config, boundary_release=release)
        print(f"[bench] session release={release} …", file=sys.stderr, flush=True)
        result = measure_session(str(model), cfg, device=args.device, cache="warm", ledger=ledger,
                                 campaign=f"bench-experts-{args.device}-session", label=f"session release={release}")
        turns = result.report.turns if result.report else ()
        seconds[release] += [t.seconds for t in turns[1:]]  # turn 0 fills the cache: a cost, not the steady state
        rows.append(_session_row(release, result, turns))
    effect = ratio_effect(seconds["off"], seconds["on"])
    from workbench.formats import open_index

    blobs = open_index(model).blobs
    ceiling = sum(b.n_experts + 1 for b in blobs)  # a slice's two boundary pages, shared along each buffer
    head = [f"At most {ceiling:,} pages ({ceiling * 4096 / 2**20:.1f} MiB) can leak in this model: the boundary "
            "pages of the layer buffers (experts + 1 per buffer); the leak grows toward that and saturates.", "",
            "| session | turns | unreleased pages first → last | anon − accounted MiB first → last | "
            "major faults | tok/s median (min–max) | staged GB/s | placement |", "|---|---|---|---|---|---|---|---|"]
    return head + rows + ["", f"Turn time, release on vs off (turns 1…, pooled, independent): "
                               f"**{format_effect(effect.speedup, effect.ci_low, effect.ci_high)}** — {effect.verdict} "
                               f"({effect.reason}, n = {len(seconds['off'])} and {len(seconds['on'])} turns)."]


def _session_row(release: str, result, turns) -> str:
    if not turns:
        return f"| release={release} | 0 | — | — | — | — | — | failed: {result.error} |"
    gap = [(t.actual_anon_bytes - t.accounted_bytes) / 2**20 for t in turns]
    rates = [t.tokens_per_s for t in turns]
    gbps = sum(t.bytes_read for t in turns) / sum(t.seconds for t in turns) / 1e9
    facts = result.report.summary.facts
    return (f"| release={release} | {len(turns)} | {turns[0].unreleased_pages:,} → {turns[-1].unreleased_pages:,} | "
            f"{gap[0]:.1f} → {gap[-1]:.1f} | {sum(t.majflt for t in turns)} | {statistics.median(rates):.1f} "
            f"({min(rates):.1f}–{max(rates):.1f}) | {gbps:.2f} | {facts.placement_state}, reader {facts.reader} |")


def _emit(out: str | None, lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
    print(f"[bench] {len(lines)} lines so far", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--dir", default="data/models/bench", help="where the model and scratch files go")
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--experts", type=int, default=64, help="per layer (64 at 2 GiB and 128 at 4 GiB give A3B's 768×2048 experts)")
    ap.add_argument("--runs", type=int, default=6, help="per configuration and cache state (6+ pairs rounds)")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=8, help="decode tokens per turn")
    ap.add_argument("--cache-mib", type=float, default=512.0, help="expert cache budget of the sessions")
    ap.add_argument("--experts-per-token", type=int, default=8)
    ap.add_argument("--ceiling-size", default="1GiB")
    ap.add_argument("--parts", default="ceilings,loads,session",
                    help="which parts to run, comma-separated (split a long benchmark into several commands)")
    ap.add_argument("--ledger", default=None, help="default: a fresh ledger next to the model")
    ap.add_argument("--out", default=None, help="also write the Markdown here")
    args = ap.parse_args(argv)

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    model = _model(directory, parse_size(args.size), args.experts)
    ledger = Ledger(args.ledger or directory / f"bench-experts-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    t0, env = time.perf_counter(), collect_environment(str(directory))
    parts = set(args.parts.split(","))
    walls = (measure_ceilings(directory, devices=(args.device,), size=parse_size(args.ceiling_size), ledger=ledger)
             if "ceilings" in parts else None)
    lines = [f"# MoE expert benchmark — {args.device}, {model.name} ({model.stat().st_size / 2**30:.2f} GiB)", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. File: `{model}`: {_shape(model)}.",
             (f"Loads: {args.runs} fresh worker processes per configuration and cache state, the four configurations "
              f"interleaved, device bytes verified after every run. " if "loads" in parts else "")
             + (f"Sessions: {args.turns} turns × {args.tokens} tokens, k = {args.experts_per_token}, cache "
                f"{args.cache_mib:g} MiB, placement inplace, order off, on, on, off. " if "session" in parts else "")
             + f"Ledger: `{ledger.path}`."]
    if walls is not None:
        lines += ["", "## Ceilings (this machine, measured first)", "", *_ceiling_lines(walls)]
    _emit(args.out, lines)
    configs = [RunConfig(str(model), name, params, args.device, label=label) for label, name, params in CONFIGS]
    device_info = None
    lines += ["", "## Loads"] if "loads" in parts else []
    for cache in ("cold", "warm") if "loads" in parts else ():
        results = measure(configs, runs=args.runs, cache=cache, ledger=ledger, progress=_say,
                          campaign=f"bench-experts-{args.device}-{cache}",
                          hypothesis="one-copy blob uploads and in-place O_DIRECT against their baselines")
        ok = next((r for a in results for r in a.runs if r.ok), None)
        device_info = device_info or (dict(ok.report.device_info) if ok else None)
        lines += ["", *_load_section(cache, results)]
        _emit(args.out, lines)
    if "session" in parts:
        lines += ["", "## Long session: boundary release off vs on", "", *_sessions(args, model, ledger)]
    lines.insert(3, f"Machine: {_machine(env, device_info)}; total wall {time.perf_counter() - t0:.0f} s.")
    _emit(args.out, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
