"""The miss path as decode-session A/Bs (issue 34 §4 and §5): batched warm misses against the ring, and
where ``--miss auto`` lands against fetch and host.

    python benchmarks/bench/bench_miss.py                                   # this CPU box: host backend
    python benchmarks/bench/bench_miss.py --device cuda --dir /tmp/bench --size 2GiB \\
        --out docs/benchmarks/miss-h200.md                            # the H200 (gpu_session.sh session-miss)

Groups (``--groups``, comma-separated):

* ``batch`` — the ring's warm rate on the same file first (``workbench run --strategy ring --cache warm``,
  ``--ring-runs`` fresh processes: the file's bytes over each run's load), then a session A/B warm,
  ``--lanes`` lanes, overlap, compute none: ``batch_misses=off`` against ``batch_misses=on``. Per cell the
  misses' staged GB/s and tok/s; the staged GB/s of each arm over the ring's median. Unbatched, staged GB/s
  is a read's time alone (uploads ran on the decode thread after it); batched, a batch's read and upload
  (stricter): tok/s and the stall are the like-for-like figures.
* ``miss`` — a session A/B with the experts' products on the device (``--compute device``): ``miss=fetch``,
  ``miss=host``, ``miss=auto`` (fetch the baseline). Per cell tok/s, the host's share of the misses and the
  per-token fetch (read + upload waits), host compute and device compute ms.

Prints Markdown (and writes it with ``--out``); every cell is in the ledger.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_session import _ab, _emit, _model  # noqa: E402
from bench_session_report import ab_section, model_line  # noqa: E402
from bench_strategies import _machine  # noqa: E402
from miss_auto import auto_against_best  # noqa: E402

from workbench.expert.session import SessionConfig  # noqa: E402
from workbench.formats.synth import parse_size  # noqa: E402
from workbench.ledger import Ledger  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402

OPTIONS: dict[str, tuple[object, str]] = {
    "--device": ("host", "host | cuda[:n]"), "--dir": ("data/models/bench", "where the model goes (reused when there)"),
    "--size": ("256MiB", "the synthetic GGUF's size"), "--experts": (64, "per layer (A3B-like: 64 at 2 GiB)"),
    "--alignment": (64, "GGUF alignment"), "--cache-mib": (64.0, "expert cache; the model must be larger"),
    "--turns": (6, "turns per cell (the first, the cache filling, is left out of the effects)"),
    "--tokens": (4, "decode tokens per turn"), "--rounds": (6, "A/B rounds: cells per arm (6: paired, and a claim)"),
    "--lanes": (4, "reader lanes"), "--groups": ("batch,miss", "batch | miss, comma-separated"),
    "--ring-runs": (6, "fresh-process ring loads for the ring's warm rate"),
    "--batch-arms": ("batch_misses=off;batch_misses=on", "the batch group's arms, ';'-separated (the first the "
                     "baseline), e.g. add 'batch_misses=on release_advice=free'"),
    "--miss-tokens": (4, "decode tokens per turn in the miss A/B (the host arm is slow: gguf-py dequantizes Q4_0)"),
    "--miss-turns": (4, "turns per cell in the miss A/B"),
    "--miss-arms": ("miss=fetch;miss=host;miss=auto", "the miss group's arms, ';'-separated (the first the baseline; "
                    "auto is placed against the faster fixed arm run beside it: leave the host out only where it "
                    "is known slower, to afford longer sessions)"),
    "--cell-timeout": (300.0, "seconds a cell"), "--ledger": (None, "default: a fresh ledger next to the model"),
    "--out": (None, "also write the Markdown here"),
}
EFFECTS = ["tok/s", "staged GB/s", "stall ms/token", "token p50 ms", "token p99 ms", "bookkeeping s/token"]


def ring_rate(args, model: Path, ledger: Path) -> tuple[float | None, list[float], str]:
    """The ring's warm GB/s on ``model`` (median over fresh-process runs), each run's, and a note."""
    cmd = [sys.executable, "-m", "workbench.cli", "run", str(model), "--strategy", "ring", "--device", args.device,
           "--cache", "warm", "--runs", str(args.ring_runs), "--json", "--ledger", str(ledger),
           "--campaign", f"bench-miss-ring-{args.device}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        doc = json.loads(done.stdout)
        doc = doc[0] if isinstance(doc, list) else doc
        rates = [r["bytes"] / r["load_s"] / 1e9 for r in doc["runs"] if not r.get("error") and r.get("load_s")]
    except (ValueError, KeyError, TypeError, IndexError):
        return None, [], f"ring failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
    return (statistics.median(rates) if rates else None), rates, ""


def rows(result, keys: list[str]) -> list[str]:
    head = "| cell | arm | round | " + " | ".join(keys) + " |"
    lines = ["", head, "|" + "---|" * (3 + len(keys))]
    for n, ((i, rnd, c), f) in enumerate(zip(result.cells, result.figures)):
        if f is None:
            lines.append(f"| {n + 1} | {result.arms[i].label} | {rnd + 1} | failed: {c.error} |"
                         + " |" * (len(keys) - 1))
            continue
        vals = " | ".join("—" if f[k] < 0 else f"{f[k]:.3f}" if k == "host share" else f"{f[k]:.2f}" for k in keys)
        lines.append(f"| {n + 1} `{c.attempt_id[:8]}` | {result.arms[i].label} | {rnd + 1} | {vals} |")
    return lines


def staged_of_ring(result, ring: float | None) -> list[str]:
    if not ring:
        return ["", "No ring rate: staged GB/s stands alone."]
    out = []
    for key, say in (("staged GB/s", "Staged GB/s (the lanes' meter)"),
                     ("landed GB/s over stall", "Landed GB/s over the stall (the like-for-like rate)")):
        out += ["", f"{say} over the ring's warm {ring:.2f} GB/s (median of each arm's cells):", ""]
        for i, arm in enumerate(result.arms):
            vals = [f[key] for (a, _, _), f in zip(result.cells, result.figures) if a == i and f and f.get(key, -1) > 0]
            if vals:
                med = statistics.median(vals)
                out.append(f"- {arm.label}: {med:.2f} GB/s = {med / ring:.2f} of the ring "
                           f"(cells {min(vals):.2f}–{max(vals):.2f})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, (default, say) in OPTIONS.items():
        ap.add_argument(flag, default=default, help=say, type=type(default) if default is not None else None)
    args = ap.parse_args(argv)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    model = _model(directory, parse_size(args.size), args.experts, args.alignment)
    ledger_path = Path(args.ledger or directory / f"bench-miss-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    ledger = Ledger(ledger_path)
    t0, env = time.perf_counter(), collect_environment(str(directory))
    lines = [f"# The miss path: batched warm misses and --miss — {args.device}, {model.name}", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {_machine(env, None)}.",
             f"Model: `{model}`: {model_line(model)}. Ledger: `{ledger_path}`.", ""]
    failed = False
    if "batch" in groups:
        ledger.close()  # the ring's runs write the same ledger from their own process
        ring, rates, note = ring_rate(args, model, ledger_path)
        ledger = Ledger(ledger_path)
        base = SessionConfig(turns=args.turns, tokens=args.tokens, cache_mib=args.cache_mib, lanes=args.lanes,
                             overlap=True, compute="none", reader="pread")  # warm: O_DIRECT would go to the disk
        result = _ab(args, model, ledger, base, [a.strip() for a in args.batch_arms.split(";") if a.strip()], "warm",
                     f"bench-miss-batch-{args.device}")
        failed |= bool(result.failed_checks)
        lines += ["## Batched warm misses against the ring", "",
                  f"Ring warm: {', '.join(f'{r:.2f}' for r in rates) or note} GB/s (n = {len(rates)} fresh processes). "
                  f"Sessions: {args.turns} turns × {args.tokens} tokens, cache {args.cache_mib:g} MiB, "
                  f"{args.lanes} lanes, "
                  f"overlap, compute none, reader pread, warm before each cell, {args.rounds} rounds (ABBA).",
                  *rows(result, ["tok/s", "staged GB/s", "stall ms/token", "fetch ms/token", "landed GB/s over stall"]),
                  *staged_of_ring(result, ring), *ab_section(result, EFFECTS), ""]
    if "miss" in groups:
        base = SessionConfig(turns=args.miss_turns, tokens=args.miss_tokens, cache_mib=args.cache_mib, lanes=args.lanes,
                             overlap=True, compute="device", reader="pread")
        result = _ab(args, model, ledger, base, [a.strip() for a in args.miss_arms.split(";") if a.strip()], "warm",
                     f"bench-miss-auto-{args.device}")
        failed |= bool(result.failed_checks)
        lines += ["## --miss fetch, host, auto", "",
                  f"Sessions: {args.miss_turns} turns × {args.miss_tokens} tokens, cache {args.cache_mib:g} MiB, "
                  f"{args.lanes} "
                  f"lanes, overlap, compute device, reader pread, warm before each cell, {args.rounds} rounds (ABBA).",
                  *rows(result, ["tok/s", "host share", "fetch ms/token", "host ms/token", "device ms/token"]),
                  *ab_section(result, ["tok/s", "token p50 ms", "token p99 ms"]), *auto_against_best(result), ""]
    lines.append(f"Wall time of the benchmark: {time.perf_counter() - t0:.0f} s.")
    _emit(args.out, lines)
    ledger.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
