"""Issue 25's benchmark: every size at the wall — a load's fixed part and streaming part, warm, from
64 MiB to the full 16 GB checkpoint, against this run's walls and the peers' buffered modes.

    python3 benchmarks/bench/bench_sizes.py --device cuda --dir /tmp/bench --sizes 64MiB,256MiB,1GiB,2GiB,full \\
        --moe 2GiB --runs 6 --out OUT
    python3 benchmarks/bench/bench_sizes.py --device host --dir /tmp/bench --sizes 64MiB,256MiB --runs 6 \\
        --spec ring --spec pread --spec mmap      # the 2-core VM: ring against the simple strategies

For each model (dense bf16 safetensors of each size, Llama-3-8B-shaped at 16 GB; with ``--moe`` the A3B-like
MoE GGUF of that size): its walls in this run — the page cache read whole by as many readers as the
machine has cores (best of 3) and the pinned host→device copy — then every ``--spec`` (default: ``ring``,
``ring fit=0 provision=upfront`` — the ring before issue 25 — and the peers' buffered modes where they
load the format; on the MoE GGUF ``ring`` and ``experts``), warm, ``--runs`` fresh processes each,
interleaved, every device byte read back and compared. The table gives per config: median ms, GB/s,
its share of the wall, the fixed part (index, probe, allocation, staging, reader start, release) and
the streaming part (medians, records/fixed.py), and each row against the first with its interval.
Writes ``bench.md`` and ``bench.json`` into ``--out`` and prints the tables.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.measure.run.attempt import run_split  # noqa: E402
from workbench.measure.ceilings.reads import read_all  # noqa: E402
from workbench.records import FIXED_PARTS, fixed_parts  # noqa: E402

DENSE = ("ring", "ring fit=0 provision=upfront", "peer-instanttensor direct=0", "peer-fastsafetensors direct=0")
MOE = ("ring", "experts", "ring fit=0 provision=upfront")
MiB = 1 << 20


def make(directory: Path, size: int | None, moe: bool) -> Path:
    """The model (kept when already there), fsynced."""
    if moe:
        path = directory / f"bench-a3b-moe-{size >> 20}MiB.gguf"
        kw: dict[str, Any] = dict(format="gguf", layout="moe", experts=64, alignment=64)
    else:  # size None: the full Llama-3-8B-shaped checkpoint (16.06 GB, 291 tensors)
        tag = "llama3-8b-full" if size is None else f"{size >> 20}MiB"
        path = directory / f"bench-dense-bf16-{tag}.safetensors"
        kw = dict(format="safetensors", layout="dense", dtype="bf16", shape="llama3-8b" if size is None else None)
    if not path.exists():
        write_synthetic(path, size=size, seed=11, **kw)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def walls(path: Path, device: str) -> dict[str, float]:
    """This run's walls for ``path``: page cache read whole (cores readers, best of 3), and the copy
    engine: page-locked host memory → device, 256 MiB, best of 5 (the DMA alone: measure_h2d's
    ``pinned_staging`` path preads on one thread first, ~7 GB/s on the H200 — not the copy engine)."""
    from workbench.io.pagecache import prepare

    prepare(str(path), "warm")
    size, cores = path.stat().st_size, len(os.sched_getaffinity(0))
    out = {f"page_cache_read_file_{cores}t": size / min(read_all(str(path), size, cores, False) for _ in range(3)) / 1e9}
    out[f"h2d_{device}_pinned_dma"] = _dma_gbps(device, min(size, 256 * MiB))
    return out


def _dma_gbps(device: str, nbytes: int) -> float:
    from workbench.upload import open_device

    with open_device(device) as dev:
        staging, dst = dev.alloc_pinned(nbytes), dev.alloc(nbytes)
        staging.view[:] = os.urandom(1 << 20) * (nbytes >> 20) + b"\0" * (nbytes & ((1 << 20) - 1))
        best = float("inf")
        for _ in range(5):
            dev.synchronize()
            t0 = time.perf_counter()
            dev.copy_h2d(dst, 0, staging.view, asynchronous=True)
            dev.synchronize()
            best = min(best, time.perf_counter() - t0)
        dev.free(dst)
        dev.free_pinned(staging)
    return nbytes / best / 1e9


def runnable(path: Path, specs: list[str], device: str, say: Any) -> list[tuple[str, RunConfig]]:
    """The specs that can load ``path`` on ``device`` here (a peer missing or refusing the format is
    said and left out)."""
    from workbench.formats import open_index
    from workbench.strategies import get_strategy

    index, out = open_index(str(path)), []
    for spec in specs:
        name, *pairs = shlex.split(spec)
        params = dict(p.split("=", 1) for p in pairs)
        try:
            strategy = get_strategy(name).from_strings(params)
            avail = strategy.available() and strategy.fits(index, device.partition(":")[0])
        except Exception as exc:  # noqa: BLE001 - a module missing is a line, not the end
            avail = type("A", (), {"reason": str(exc), "__bool__": lambda self: False})()
        if not avail:
            say(f"{spec}: left out ({avail.reason})")
            continue
        out.append((spec, RunConfig(str(path), name, params, device=device, label=spec)))
    return out


def measure_model(path: Path, specs: list[str], device: str, runs: int, say: Any) -> list[Any]:
    chosen = runnable(path, specs, device, say)
    specs, configs = [s for s, _ in chosen], [c for _, c in chosen]

    def progress(done: int, total: int, config: RunConfig, run: Any) -> None:
        took = "FAILED " + str(run.error).strip().splitlines()[-1][:100] if run.error else f"{run.load_s * 1e3:.1f} ms"
        say(f"{path.name} {done}/{total} {config.label}: {took}")

    return measure(configs, runs=runs, cache="warm", labels=specs, campaign="sizes-warm",
                   hypothesis="issue 25: every size at the wall", progress=progress, timeout_s=120.0)


def row(r: Any, wall: float | None) -> dict[str, Any]:
    ok = [run for run in r.runs if run.ok]
    parts = {k: statistics.median(fixed_parts({**run.report.load.phases, "index": run.phases.get("index", 0.0)},
                                              run.report.load.counters)[k] for run in ok) * 1e3
             for k in FIXED_PARTS} if ok and all(run.report.load for run in ok) else {}
    splits = [run_split(run) for run in ok]
    splits = [s for s in splits if s]
    return {"spec": r.label, "n": r.stats.n, "verified": sum(1 for run in ok if run.verified),
            "median_ms": (r.stats.median_s or 0) * 1e3, "min_ms": (r.stats.min_s or 0) * 1e3,
            "max_ms": (r.stats.max_s or 0) * 1e3, "gbps": r.stats.gbps,
            "of_wall": (r.stats.gbps / wall) if wall and r.stats.gbps else None,
            "fixed_ms": statistics.median(s[0] for s in splits) * 1e3 if splits else None,
            "streaming_ms": statistics.median(s[1] for s in splits) * 1e3 if splits else None,
            "parts_ms": parts, "vs_first": r.effect, "verdict": r.verdict_text,
            "counters": {k: statistics.median(run.report.load.counters.get(k, 0) for run in ok) for k in
                         ("wait_us", "read_us", "issue_us", "release_us", "reader_provision_us", "settle_us",
                          "copier_register_us", "copier_issue_us", "copier_fence_us", "register_us",
                          "lived_us", "end_spread_us", "start_spread_us")}
            if ok and all(run.report.load for run in ok) else {},
            "engaged": next((list(run.engaged) for run in ok), []), "settings": dict(r.settings)}


def table(model: str, size: int, w: dict[str, float], rows: list[dict[str, Any]]) -> list[str]:
    wall = min(w.values()) if w else None
    head = [f"### {model} ({size / 1e9:.2f} GB)", "",
            "walls: " + ", ".join(f"{k} {v:.2f} GB/s" for k, v in w.items()) +
            (f" → {size / wall / 1e6:.1f} ms at the lower" if wall else ""), "",
            "| config | n (verified) | median ms (min–max) | GB/s | of wall | fixed + streaming ms | fixed parts ms: "
            + " / ".join(FIXED_PARTS) + " | vs first [95 % CI] |", "|---|---|---|---|---|---|---|---|"]
    for x in rows:
        parts = " / ".join(f"{x['parts_ms'].get(k, 0):.1f}" for k in FIXED_PARTS) if x["parts_ms"] else "—"
        split = f"{x['fixed_ms']:.1f} + {x['streaming_ms']:.1f}" if x["fixed_ms"] is not None else "—"
        share = "—" if x["of_wall"] is None else f"{x['of_wall']:.0%}"
        head.append(f"| `{x['spec']}` | {x['n']} ({x['verified']}) | {x['median_ms']:.1f} ({x['min_ms']:.1f}–"
                    f"{x['max_ms']:.1f}) | {x['gbps'] or 0:.2f} | {share} | {split} | {parts} | {x['vs_first']} |")
    return head + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dir", default="data/models/bench")
    ap.add_argument("--sizes", default="64MiB,256MiB,1GiB,2GiB", help="dense sizes; 'full': the 16.06 GB checkpoint")
    ap.add_argument("--moe", default="", help="size of the MoE GGUF (empty: none)")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--spec", action="append", default=[], help="a config (default: ring, the old ring, peers)")
    ap.add_argument("--big-runs", type=int, default=0, help="runs at >= 8 GiB (0: --runs)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    say = lambda m: print(f"[sizes {time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    out = Path(args.out or directory / f"sizes-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    models = [(None if s == "full" else parse_size(s), False) for s in args.sizes.split(",") if s]
    models += [(parse_size(args.moe), True)] if args.moe else []
    lines = [f"# bench_sizes — {args.device}, {time.strftime('%Y-%m-%d %H:%M %Z')}, n = {args.runs} a config, warm, "
             f"fresh process per run, interleaved", "", f"load average before: {os.getloadavg()}", ""]
    doc: dict[str, Any] = {"device": args.device, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "models": []}
    for size, moe in models:
        t0 = time.perf_counter()
        path = make(directory, size, moe)
        say(f"{path.name} ready in {time.perf_counter() - t0:.1f} s")
        specs = args.spec or list(MOE if moe else DENSE)
        w = walls(path, args.device.partition(":")[0])
        say(f"walls {w}")
        runs = args.big_runs if args.big_runs and path.stat().st_size >= 8 << 30 else args.runs
        results = measure_model(path, specs, args.device, runs, say)
        rows = [row(r, min(w.values()) if w else None) for r in results]
        lines += table(path.name, path.stat().st_size, w, rows)
        doc["models"].append({"file": path.name, "bytes": path.stat().st_size, "walls": w, "rows": rows,
                              "loadavg_after": os.getloadavg()})
        (out / "bench.md").write_text("\n".join(lines) + "\n")
        (out / "bench.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    lines.append(f"load average after: {os.getloadavg()}")
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
