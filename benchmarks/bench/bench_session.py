"""MoE decode-session benchmark: the second write-up's experiment as session A/Bs.

    python benchmarks/bench/bench_session.py                          # this CPU box: host backend, numpy compute
    python benchmarks/bench/bench_session.py --device cuda --size 8GiB --experts 128 --cache-mib 2000 \\
        --out docs/benchmarks/session-h200.md                   # the H200: cuda, the experts' matmuls on the GPU

1. The machine's read walls (``measure_ceilings``), so each cell's staged GB/s is held against the wall
   that bounds it.
2. **Placement**: ``placement=bounce`` vs ``placement=inplace`` with ``--lanes`` reader lanes, overlap and
   ``--compute`` on a model larger than its cache, ``--rounds`` rounds (ABBA: each arm ``rounds`` cells),
   ``--turns`` turns per cell, every cell's landed bytes verified after each turn (untimed). Effects:
   tok/s, residual s/token, staged GB/s (ratios with 95 % intervals, paired by round) and the check
   that every cell read the same bytes per token.
3. **Pressure**: ``boundary-release=on`` vs ``off`` under a memory limit, buffered reads so the page cache
   is in play, cold before every cell. Each limit is the release-on session's own anonymous peak
   (measured first, unlimited) plus a headroom (``--headroom-mib 32,4``): with room for the leak the
   leaking build gives up page cache (re-reads, refaults); with none it meets the OOM killer.
   ``--pressure-method auto`` (the default) confines it to each cell with a memory cgroup where one
   can be made, else holds **one** locked balloon over all the cells of a limit (inflated once,
   before the first cell), leaving the limit plus the machine's own working set: ``Mapped`` at
   inflation plus the worker's mapped file pages as the unlimited probe measured them after its
   warm-up turn (:mod:`workbench.measure.session.balloon`). Which method ran, the working set and the
   inflation time are in the report. Under a balloon each cell's worker locks its own resident file
   pages after its warm-up turn, inside the room left for them (:mod:`workbench.io.own_pages`). Per
   cell: what the pressure hit — the model's pages lost and read again against major faults (none of
   which can hit the model: a session reads it, never maps it), storage reads the model's residency does
   not explain, swap —, the bytes it locked, and the outcome's kind: ``own-files`` when its own major
   faults after turn 0 still run above a few a turn (the cell measures the method, not the session; the
   A/B then fails that check and the verdict says it is not a finding). ``--swap-mib N`` runs the part with an N MiB swap file on (turned off and
   deleted after, even if the run is killed: :mod:`workbench.measure.session.swap`), recording swap growth
   per turn; where swap cannot be turned on the report says why and runs without.
   Whether the write-up's symptom direction (more major faults, lower tok/s with the leak) is
   reproduced is stated for each limit.

Prints Markdown (and writes it with ``--out``), rewritten after every part so a cut-off run keeps its part.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.errors import WorkbenchError  # noqa: E402
from workbench.expert.layout import layout_blobs, leak_bound_pages  # noqa: E402
from workbench.expert.session import SessionConfig  # noqa: E402
from workbench.formats import open_index  # noqa: E402
from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.ledger import Ledger  # noqa: E402
from workbench.measure.ceilings.walls import measure_ceilings  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402
from workbench.measure.session.pressure import MemoryPressure  # noqa: E402
from workbench.measure.session.runner import measure_session  # noqa: E402
from workbench.measure.session.ab import parse_ab, record_verdicts, run_session_ab  # noqa: E402
from workbench.measure.session.swap import SwapFile  # noqa: E402
from workbench.measure.session.swap import enabled as enabled_swap  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_session_report import ab_section, model_line, pressure_cells, pressure_verdict  # noqa: E402
from bench_strategies import _ceiling_lines, _machine  # noqa: E402

MiB = 1 << 20


def _model(directory: Path, size: int, experts: int, alignment: int) -> Path:
    path = directory / f"bench-session-a{alignment}-e{experts}-{size >> 20}MiB.gguf"
    if not path.exists() or abs(path.stat().st_size - size) > size * 0.1:
        write_synthetic(path, format="gguf", layout="moe", size=size, experts=experts, alignment=alignment, seed=17)
    return path


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _ab(args, model: Path, ledger: Ledger, base: SessionConfig, specs: list[str], cache: str, campaign: str,
        pressure=None):
    arms = [parse_ab(spec, base, cache, args.device) for spec in specs]

    def cell(arm, label):
        result = measure_session(str(model), arm.config, device=arm.device, cache=arm.cache, ledger=ledger,
                                 campaign=campaign, label=label, timeout_s=args.cell_timeout,
                                 memory_method="cgroup" if pressure is None else "balloon", pressure=pressure)
        s = result.report.summary if result.report else None
        _say(f"  {label}: " + (f"{s.tokens_per_s:.2f} tok/s, {len(result.report.turns)} turns"
                               + (f" — {result.error}" if result.error else "") if s else f"FAILED {result.error}"))
        return result
    result = run_session_ab(str(model), arms, args.rounds, run_cell=cell, say=_say)
    record_verdicts(ledger, result)
    return result


def _placement(args, model: Path, ledger: Ledger, base: SessionConfig) -> tuple[list[str], object]:
    result = _ab(args, model, ledger, base, ["placement=bounce", "placement=inplace"], args.cache,
                 f"bench-session-{args.device}-placement")
    head = [f"Base: {args.turns} turns × {args.tokens} tokens per cell, cache {base.cache_mib:g} MiB, lanes "
            f"{base.lanes}, overlap, compute `{base.compute}`, page cache `{args.cache}` before each cell."]
    return head + ab_section(result, ["tok/s", "residual s/token", "staged GB/s", "unreleased pages"]), result


def _pressure_method(requested: str) -> tuple[str, str]:
    """``cgroup`` where a memory cgroup can be made (and ``requested`` allows it), else ``balloon``; and
    where the cgroup is made (the own cgroup, else the nearest ancestor that can hold one: the H200's root)."""
    if requested == "balloon":
        return "balloon", ""
    try:
        with MemoryPressure(64, "cgroup") as probe:
            where = probe.limit.cgroup.where() if probe.limit.cgroup is not None else ""
            return "cgroup", f"cgroup v{probe.limit.version}, {where}"
    except WorkbenchError:
        if requested == "cgroup":
            raise
        return "balloon", ""


def _pressure(args, model: Path, ledger: Ledger, base: SessionConfig) -> list[str]:
    with contextlib.ExitStack() as stack:
        swap = _swap(args, stack)
        return [swap, ""] + _pressure_part(args, model, ledger, base)


def _swap(args, stack: contextlib.ExitStack) -> str:
    if not args.swap_mib:
        on = [p for p in enabled_swap() if p]
        return f"Swap: none asked; the machine has {'swap on (' + ', '.join(on) + ')' if on else 'no swap'}."
    try:
        made = stack.enter_context(SwapFile(args.dir, args.swap_mib))
    except OSError as exc:
        return f"Swap: **not on** — {exc.strerror or exc}; the part ran without the {args.swap_mib:,} MiB asked."
    reaped = f" (turned off {len(made.reaped)} left by a killed run first)" if made.reaped else ""
    return (f"Swap: a {args.swap_mib:,} MiB swap file `{made.path}` on for this part, off and deleted after{reaped}; "
            "swap growth per turn in the cells' table.")


def _pressure_part(args, model: Path, ledger: Ledger, base: SessionConfig) -> list[str]:
    index = open_index(model)
    bound = leak_bound_pages(layout_blobs(index.blobs, "inplace")[0]) * 4096
    method, where = _pressure_method(args.pressure_method)
    probe_cfg = dataclasses.replace(base, reader="pread", boundary_release="on", turns=max(3, args.turns // 4))
    _say(f"pressure ({method}): measuring the release-on session's own memory, unlimited …")
    probe = measure_session(str(model), probe_cfg, device=args.device, cache="cold", ledger=ledger,
                            campaign=f"bench-session-{args.device}-pressure-probe", label="probe release=on")
    if probe.report is None:
        return [f"Not run: the unlimited probe failed ({probe.error})."]
    anon = max(t.actual_anon_bytes for t in probe.report.turns)
    warm = probe.report.turns[1:] or probe.report.turns  # after the warm-up turn
    files = max(t.file_rss_bytes for t in warm)
    how = (f"each cell in a memory cgroup of its own (pressure confined to the session; {where})"
           if method == "cgroup" else
           "one locked balloon per limit, held over all its cells and inflated before the first; it leaves the "
           "limit plus the machine's working set (Mapped at inflation + the worker's mapped file pages, "
           f"{files / MiB:,.1f} MiB as the probe measured them after its warm-up turn, which each cell's worker "
           "locks, as much of them as are resident, after its turn 0; the OOM killer takes a cell's worker, "
           "never this process: workbench.measure.session.oom)")
    lines = [f"Method: **{method}** (asked: `{args.pressure_method}`) — {how}.",
             f"The model can leak {bound / MiB:.1f} MiB (its boundary pages). The release-on session's anonymous "
             f"peak, unlimited: {anon / MiB:.1f} MiB; its mapped file pages after the warm-up turn "
             f"{files / MiB:.1f} MiB (probe `{probe.attempt_id[:8]}`). Each limit below is the peak plus a headroom "
             f"for the page cache and the leak; reader pread (buffered, so the page cache is in play), cold before "
             f"every cell, {args.turns} turns × {args.tokens} tokens, {args.rounds} cells a side (ABBA)."]
    for headroom in [float(h) for h in args.headroom_mib.split(",")]:
        limit = round(args.memory_limit or anon / MiB + headroom, 1)
        cfg = dataclasses.replace(base, reader="pread", memory_limit_mib=limit)
        _say(f"pressure: limit {limit:g} MiB (headroom {headroom:g} MiB) …")
        with contextlib.ExitStack() as stack:
            held = None
            if method == "balloon":
                held = stack.enter_context(MemoryPressure(limit, "balloon", worker_file_bytes=files))
                _say(f"  {held.limit.detail}")
            result = _ab(args, model, ledger, cfg, ["boundary-release=on", "boundary-release=off"], "cold",
                         f"bench-session-{args.device}-pressure-{headroom:g}", pressure=held)
        memory = sorted({re.sub(r" /\S+/workbench-session-[\w-]+:", ":", c.memory.split(" — ")[0])
                         for _, _, c in result.cells if c.memory})  # one line per way, not per cgroup
        body = ab_section(result, ["tok/s", "major faults/token", "disk MiB/token", "refaults/token",
                                   "unreleased pages", "residual s/token"])
        lines += ["", f"### Limit {limit:g} MiB: {headroom:g} MiB above the fixed build's own peak", "",
                  f"Enforced by: {'; '.join(memory) if memory else '—'}.", *body, "",
                  "What the pressure hit, per cell (turn 0 left out):", *pressure_cells(result), "",
                  pressure_verdict(result)]
        if args.memory_limit:
            break
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--dir", default="data/models/bench", help="where the model and scratch files go")
    ap.add_argument("--size", default="256MiB")
    ap.add_argument("--experts", type=int, default=256, help="per layer (small experts: many boundary pages)")
    ap.add_argument("--alignment", type=int, default=64, help="GGUF alignment (64: placement engages)")
    ap.add_argument("--cache-mib", type=float, default=64.0, help="expert cache; the model must be larger")
    ap.add_argument("--experts-per-token", type=int, default=None, help="default a quarter of the experts, 1-8")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=8, help="decode tokens per turn")
    ap.add_argument("--rounds", type=int, default=4, help="A/B rounds: cells per arm")
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--compute", default="device", help="device (numpy on host, torch/cupy on cuda) | sleep:MS | none")
    ap.add_argument("--cache", default="warm", help="page-cache state before each placement cell")
    ap.add_argument("--memory-limit", type=float, default=None, help="MiB; default: calibrated (see the doc)")
    ap.add_argument("--pressure-method", default="auto", choices=("cgroup", "auto", "balloon"),
                    help="how limits are enforced (auto: a cgroup per cell, else one balloon per limit leaving the "
                         "machine's measured working set)")
    ap.add_argument("--swap-mib", type=int, default=0, help="run the pressure part with a swap file this large")
    ap.add_argument("--headroom-mib", default="32,4",
                    help="limits to run: MiB above the release-on session's own peak (room for the leak, then none)")
    ap.add_argument("--cell-timeout", type=float, default=900.0)
    ap.add_argument("--parts", default="ceilings,placement,pressure")
    ap.add_argument("--ledger", default=None, help="default: a fresh ledger next to the model")
    ap.add_argument("--out", default=None, help="also write the Markdown here")
    args = ap.parse_args(argv)

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    model = _model(directory, parse_size(args.size), args.experts, args.alignment)
    ledger = Ledger(args.ledger or directory / f"bench-session-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    parts = set(args.parts.split(","))
    t0, env = time.perf_counter(), collect_environment(str(directory))
    base = SessionConfig(turns=args.turns, tokens=args.tokens, cache_mib=args.cache_mib, lanes=args.lanes,
                         overlap=True, compute=args.compute, experts_per_token=args.experts_per_token)
    lines = [f"# MoE decode-session benchmark — {args.device}, {model.name}", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {_machine(env, None)}.",
             f"Model: `{model}`: {model_line(model)}. Ledger: `{ledger.path}`."]
    if "ceilings" in parts:
        walls = measure_ceilings(directory, devices=(args.device,), size=min(parse_size(args.size), 512 * MiB),
                                 ledger=ledger)
        lines += ["", "## Read walls (this machine, measured first)", "", *_ceiling_lines(walls)]
    _emit(args.out, lines)
    if "placement" in parts:
        section, _ = _placement(args, model, ledger, base)
        lines += ["", "## Bounce vs in place: a decode session A/B", "", *section]
        _emit(args.out, lines)
    if "pressure" in parts:
        try:
            section = _pressure(args, model, ledger, base)
        except WorkbenchError as exc:  # no memory cgroup here (and no balloon allowed): say so, keep the rest
            section = [f"Not run here: {exc}"]
        lines += ["", "## Boundary release off vs on under memory pressure", "", *section]
    lines += ["", f"Wall time of the benchmark: {time.perf_counter() - t0:.0f} s."]
    _emit(args.out, lines)
    ledger.close()
    return 0


def _emit(out: str | None, lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
    print(text if not out else f"[bench] {len(lines)} lines written to {out}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
