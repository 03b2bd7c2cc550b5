"""Issue 17's benchmark: does sharding cost anything? One command, one run, side by side.

    python3 benchmarks/bench/bench_sharded.py --device cuda --dir /tmp/bench --out OUT        # the H200 (16 GB)
    python3 benchmarks/bench/bench_sharded.py --device host --shape none --size 256MiB --out OUT  # a small host run

The same tensors twice — the Llama-3-8B-shaped bf16 checkpoint in ``--shards`` files (HF's layout:
``model-0000i-of-0000N.safetensors`` + ``model.safetensors.index.json``) and as one file (same plan, same
seed, so every tensor has the same bytes) — then, in this order and inside ``--budget-s``:

1. the walls of this run: the whole checkpoint read through the page cache (resident, ``--wall-threads``
   readers over every file at once) and from disk (every file evicted and checked cold first);
2. warm: ``ring`` on the one file (first), ``ring`` on the shards, and every peer that can load the
   shards here, at its defaults and buffered (``direct=0``; ``--warm-peers`` picks) — interleaved, fresh
   process per run, the cache state set and checked per file before each run, every device byte read
   back and compared;
3. cold: the same with the peers at their defaults (``--cold-peers buffered`` adds their buffered rows).

Ratios are computed here from the runs, rounds paired (``ratio_effect``): the runner's own verdict never
pairs two different models. Writes ``bench.md`` and ``bench.json`` to ``--out`` and the ledger beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.formats import open_index  # noqa: E402
from workbench.formats.index import TensorIndex  # noqa: E402
from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.io.pagecache import prepare  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.measure.run.effect import ratio_effect  # noqa: E402
from workbench.records import format_effect  # noqa: E402
from workbench.strategies import STRATEGIES  # noqa: E402

CHUNK = 16 << 20


def say(msg: str) -> None:
    print(f"[sharded {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_models(directory: Path, size: int | None, shape: str | None, shards: int) -> tuple[TensorIndex, TensorIndex]:
    """(the sharded set, the one file) with the same tensors; reused when complete, fsynced."""
    tag = f"{shape or 'ladder'}-bf16-{'full' if size is None else f'{size >> 20}MiB'}"
    one_path, set_dir = directory / f"one-{tag}.safetensors", directory / f"shards{shards}-{tag}"
    made = []
    for out, n in ((set_dir, shards), (one_path, 1)):
        try:
            index = open_index(out)
        except Exception:  # noqa: BLE001 - not there yet (or a partial one): write it
            t0 = time.perf_counter()
            index = write_synthetic(out, format="safetensors", layout="dense", size=size, dtype="bf16",
                                    shape=shape, seed=17, shards=n)
            say(f"wrote {index.path}: {index.size / 1e9:.2f} GB in {len(index.files)} files, "
                f"{time.perf_counter() - t0:.1f} s")
        for f in index.files:  # dirty pages cannot be evicted: every cold run needs the bytes on disk
            fd = os.open(f.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        made.append(index)
    if made[0].nbytes != made[1].nbytes or len(made[0]) != len(made[1]):
        raise SystemExit("the sharded set and the one file do not hold the same tensors")
    return made[0], made[1]


def read_all(paths: list[str], threads: int) -> float:
    """Seconds to read every byte of ``paths`` with ``threads`` readers sharing one queue of chunks."""
    chunks = [(p, off, min(CHUNK, size - off)) for p in paths for size in [os.path.getsize(p)]
              for off in range(0, size, CHUNK)]
    fds = {p: os.open(p, os.O_RDONLY | os.O_CLOEXEC) for p in paths}

    def reader(k: int) -> None:
        buf = bytearray(CHUNK)
        for p, off, n in chunks[k::threads]:
            os.preadv(fds[p], [memoryview(buf)[:n]], off)

    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(reader, range(threads)))
        return time.perf_counter() - t0
    finally:
        for fd in fds.values():
            os.close(fd)


def walls(index: TensorIndex, warm_threads: int, cold_threads: int, reps: int,
          states: tuple[str, ...] = ("cold", "warm")) -> dict[str, Any]:
    """The page-cache and disk walls of the whole set, measured now: GB/s per repetition (only the
    states this run's groups hold loads against)."""
    paths = [f.path for f in index.files]
    nbytes = sum(f.size for f in index.files)
    out: dict[str, Any] = {"bytes": nbytes, "files": len(paths)}
    for state, threads in (("cold", cold_threads), ("warm", warm_threads)):
        if state not in states:
            continue
        rates = []
        for _ in range(reps):
            for p in paths:
                prepare(p, state)
            rates.append(nbytes / read_all(paths, threads) / 1e9)
        out[state] = {"threads": threads, "gbps": rates, "median": statistics.median(rates)}
        say(f"wall {state}: {', '.join(f'{r:.2f}' for r in rates)} GB/s ({threads} readers, {len(paths)} files)")
    return out


def peer_specs(index: TensorIndex, backend: str, wanted: str) -> tuple[list[str], list[str]]:
    """Each registered peer that can load ``index`` on ``backend``, as ``wanted`` says: ``defaults``;
    ``buffered`` (its defaults and ``direct=0`` where it has the parameter); ``buffered-only`` (``direct=0``
    where it has it, else its defaults: warm, an O_DIRECT default reads the disk and measures nothing of
    the cache); and one line per peer that cannot."""
    specs, missing = [], []
    for name in STRATEGIES:
        try:
            cls = STRATEGIES.get(name)
        except ImportError as exc:
            missing.append(f"{name}: module missing ({exc})")
            continue
        if getattr(cls, "kind", "") != "peer":
            continue
        avail = cls.available()
        avail = cls().fits(index, backend) if avail else avail
        if not avail:
            missing.append(f"{name}: {avail.reason}")
            continue
        has_direct = "direct" in cls.param_defaults()
        if wanted != "buffered-only" or not has_direct:
            specs.append(name)
        if wanted in ("buffered", "buffered-only") and has_direct:
            specs.append(f"{name} direct=0")
    return specs, missing


def run_group(name: str, cache: str, rows: list[tuple[str, TensorIndex, str]], runs: int, device: str,
              ledger: Path) -> list[Any]:
    """``rows``: (label, model, spec) — measured interleaved, ``runs`` each."""
    configs = []
    for label, index, spec in rows:
        strategy, *pairs = spec.split()
        configs.append(RunConfig(index.path, strategy, dict(p.split("=", 1) for p in pairs), device=device,
                                 label=label))

    def progress(done: int, total: int, config: RunConfig, run: Any) -> None:
        took = f"FAILED {str(run.error).strip().splitlines()[-1][:90]}" if run.error else f"{run.load_s * 1e3:.0f} ms"
        say(f"{name} {done}/{total} {config.label}: {took}")

    return measure(configs, runs=runs, cache=cache, ledger=ledger, labels=[r[0] for r in rows],
                   campaign=f"sharded-{name}", hypothesis="issue 17: sharding costs nothing", progress=progress,
                   timeout_s=240.0)


def times(result: Any) -> list[float]:
    """Load seconds of the verified runs, in round order (a failed run leaves its round out)."""
    return [r.load_s for r in sorted(result.runs, key=lambda r: r.position) if r.ok and r.load_s]


def row_json(result: Any, wall: float) -> dict[str, Any]:
    ts = times(result)
    med = statistics.median(ts) if ts else None
    gbps = result.stats.gbps
    first = next((r for r in result.runs if r.ok), None)
    engaged = "; ".join(first.engaged) if first is not None else ""
    return {"label": result.label, "n": len(ts), "runs": len(result.runs), "median_ms": med and med * 1e3,
            "min_ms": ts and min(ts) * 1e3, "max_ms": ts and max(ts) * 1e3, "gbps": gbps,
            "wall_fraction": gbps / wall if gbps and wall else None, "engaged": engaged,
            "errors": sorted({str(r.error).strip().splitlines()[-1][:120] for r in result.runs if r.error})}


def fx(e: Any) -> str:
    """``0.98× [0.93–1.04] inconclusive (interval includes 1, paired rounds)``."""
    return f"{format_effect(e.speedup, e.ci_low, e.ci_high)} {e.verdict} ({e.reason}, {e.method or 'no resampling'})"


def claims(results: list[Any], wall: float) -> list[str]:
    """Ring on the shards against ring on the one file, against the wall, and against every peer."""
    by = {r.label: r for r in results}
    ring_one, ring_set = by.get("ring one file"), by.get("ring shards")
    out = []
    if ring_one and ring_set:
        e = ratio_effect(times(ring_one), times(ring_set), paired=True)
        out.append(f"ring on the shards vs ring on the one file: {fx(e)} (above 1 the shards load "
                   f"faster; goal ≥ 0.95×)")
    if ring_set and ring_set.stats.gbps and wall:
        out.append(f"ring on the shards at {ring_set.stats.gbps:.2f} GB/s = {ring_set.stats.gbps / wall:.0%} of the "
                   f"run's wall ({wall:.2f} GB/s; goal ≥ 95 %)")
    for r in results:
        if r.label.startswith("peer") and ring_set and times(r) and times(ring_set):
            e = ratio_effect(times(r), times(ring_set), paired=True)
            out.append(f"ring shards vs {r.label}: {fx(e)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dir", default="data/models/bench")
    ap.add_argument("--size", default=None, help="default: the real model (llama3-8b: 16.06 GB)")
    ap.add_argument("--shape", default="llama3-8b", help="llama3-8b, or none (the synth ladder; needs --size)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold-runs", type=int, default=5)
    peer_modes = ("defaults", "buffered", "buffered-only", "none")
    ap.add_argument("--warm-peers", choices=peer_modes, default="buffered",
                    help="warm rows of the peers: defaults, defaults and buffered (default), buffered-only "
                         "(direct=0 where a peer has it), none (a short host run)")
    ap.add_argument("--cold-peers", choices=peer_modes, default="defaults")
    ap.add_argument("--wall-threads", type=int, default=16)
    ap.add_argument("--cold-wall-threads", type=int, default=8)
    ap.add_argument("--wall-reps", type=int, default=3)
    ap.add_argument("--groups", default="warm,cold",
                    help="warm, cold; -ring: ring one file and shards only; -peers: ring shards and the peers")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    shape = None if args.shape == "none" else args.shape
    sharded, one = make_models(directory, None if args.size is None else parse_size(args.size), shape, args.shards)
    backend = args.device.partition(":")[0]
    doc: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": os.uname().nodename,
                           "cores": os.cpu_count(), "device": args.device, "model_bytes": sharded.nbytes,
                           "files": [f.name for f in sharded.files], "args": vars(args)}
    groups = tuple(args.groups.split(","))
    doc["walls"] = walls(sharded, args.wall_threads, args.cold_wall_threads, args.wall_reps,
                         tuple(g.partition("-")[0] for g in groups))
    ledger = out / "ledger.sqlite"
    for group in groups:
        cache, _, part = group.partition("-")  # warm | warm-ring (no peers) | warm-peers (ring shards + peers)
        wanted = args.warm_peers if cache == "warm" else args.cold_peers
        peers, doc["peers_unavailable"] = peer_specs(sharded, backend, wanted)
        if wanted == "none" or part == "ring":
            peers = []
        rows = [("ring one file", one, "ring")] if part != "peers" else []
        rows += [("ring shards", sharded, "ring")] + [(spec, sharded, spec) for spec in peers]
        results = run_group(group, cache, rows, args.runs if cache == "warm" else args.cold_runs, args.device, ledger)
        wall = doc["walls"][cache]["median"]
        doc[group] = {"rows": [row_json(r, wall) for r in results], "claims": claims(results, wall)}
        (out / "bench.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / "bench.md").write_text(render(doc))  # after each group: a step cut at its limit keeps the rest
    print(render(doc))
    return 0


def render(doc: dict[str, Any]) -> str:
    w = doc["walls"]
    named = {"warm": "page cache", "cold": "disk"}
    shown = [f"{named[s]} {w[s]['median']:.2f} GB/s ({w[s]['threads']} readers; "
             f"{', '.join(f'{x:.2f}' for x in w[s]['gbps'])})" for s in ("warm", "cold") if s in w]
    lines = [f"# Sharded vs one file — {doc['device']}, {doc['date']}, {doc['host']} ({doc['cores']} cores)", "",
             f"Model: {doc['model_bytes'] / 1e9:.2f} GB of bf16 tensors; shards: {', '.join(doc['files'])}.", "",
             f"Walls of this run (whole checkpoint, {w['files']} files): {', '.join(shown)}.", ""]
    for group in [k for k in doc if k.partition("-")[0] in ("warm", "cold") and isinstance(doc[k], dict)
                  and "rows" in doc[k]]:
        lines += [f"## {group}", "", "| config | n | median ms (min–max) | GB/s | of the wall | engaged |",
                  "|---|---|---|---|---|---|"]
        for r in doc[group]["rows"]:
            med = f"{r['median_ms']:.0f} ({r['min_ms']:.0f}–{r['max_ms']:.0f})" if r["median_ms"] else "—"
            frac = f"{r['wall_fraction']:.0%}" if r["wall_fraction"] else "—"
            gbps = f"{r['gbps']:.2f}" if r["gbps"] else "—"
            err = f" FAILED: {'; '.join(r['errors'])}" if r["errors"] else ""
            lines.append(f"| {r['label']} | {r['n']}/{r['runs']} | {med} | {gbps} | {frac} | {r['engaged']}{err} |")
        lines += [""] + [f"- {c}" for c in doc[group]["claims"]] + [""]
    if doc.get("peers_unavailable"):
        lines += ["Peers that could not run: " + "; ".join(doc["peers_unavailable"]), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
