"""Strategy benchmark: every load strategy on one large synthetic model, cold and warm, against the
machine's measured ceilings — through the runner (fresh worker per run, cache state set and verified,
interleaved, device bytes verified).

    python benchmarks/bench/bench_strategies.py                          # host, 2 GiB MoE GGUF, 5 runs
    python benchmarks/bench/bench_strategies.py --device cuda --size 8GiB --out docs/benchmarks/x.md

First the ceilings (``measure_ceilings``: cold read, page-cache read, memcpy, host→device per path),
then the prediction each strategy is up against (bytes ÷ the bounding wall), then the measured tables
as the ledger exports them for a pull request. Prints Markdown (and writes it with ``--out``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402
from workbench.ledger import Ledger, markdown_table  # noqa: E402
from workbench.measure import RunConfig, measure  # noqa: E402
from workbench.measure.ceilings.walls import measure_ceilings  # noqa: E402

# The first is the baseline: the historical per-read eviction the first write-up started from.
CONFIGS = [("pread", {"evict": "1"}), ("pread", {}), ("pread", {"upload": "pinned"}), ("willneed", {}),
           ("warmer", {}), ("mmap", {}), ("mmap", {"gate": "0.9"}), ("mmap", {"register": "1"}),
           ("populate", {}), ("lanes", {}), ("lanes", {"upload": "pinned"}), ("odirect", {})]


def _model(directory: Path, size: int, fmt: str, layout: str) -> Path:
    path = directory / f"bench-{layout}-{size >> 20}MiB.{'gguf' if fmt == 'gguf' else 'safetensors'}"
    if not path.exists() or abs(path.stat().st_size - size) > size * 0.1:
        write_synthetic(path, format=fmt, layout=layout, size=size, seed=7)
    return path


def _machine(env: dict, device_info: dict | None) -> str:
    ram = env.get("ram_bytes", 0) / 2**30
    dev = f"; device {device_info.get('name')} ({device_info.get('arch')})" if device_info else ""
    return (f"{env.get('hostname')}: {env.get('cpu_model')}, {env.get('cores')} cores, {ram:.0f} GiB RAM, "
            f"{env.get('fs_type')} ({env.get('fs_source')}), {env.get('kernel')}{dev}")


def _ceiling_lines(report) -> list[str]:
    lines = ["| wall | GB/s |", "|---|---|"]
    lines += [f"| {c.name} | {c.gbps:.2f} |" for c in sorted(report.ceilings, key=lambda c: c.name)]
    lines += [f"| {name} | not measured: {why} |" for name, why in report.skipped]
    return lines


def _predictions(report, nbytes: int, device: str) -> list[str]:
    walls = {c.name: c.gbps for c in report.ceilings}
    best = lambda prefix: max((v for k, v in walls.items() if k.startswith(prefix)), default=None)  # noqa: E731
    cold, cache = best("cold_read"), best("page_cache_read")
    h2d = best(f"h2d_{device.split(':')[0]}")
    warm = min(v for v in (cache, h2d) if v) if (cache or h2d) else None
    rows = ["| state | bounding wall | GB/s | predicted floor for the whole model |", "|---|---|---|---|"]
    for state, gbps, what in (("cold", cold, "best cold read (disk)"),
                              ("warm", warm, "min(best page-cache read, best host→device)")):
        floor = f"{nbytes / gbps / 1e9 * 1e3:.0f} ms" if gbps else "—"
        rows.append(f"| {state} | {what} | {gbps or 0:.2f} | {floor} |")
    return rows


def _say(done: int, total: int, config: RunConfig, run) -> None:
    took = "FAILED " + str(run.error)[:80] if run.error else f"{run.load_s * 1e3:.0f} ms"
    print(f"[bench] {done}/{total} {config.display}: {took} (resident before {run.resident_before})",
          file=sys.stderr, flush=True)


def _emit(out: str | None, head: list[str], sections: list[str], machine: str | None) -> None:
    if not out:
        return
    lines = head[:3] + ([f"Machine: {machine}."] if machine else []) + head[3:] + sections
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"[bench] wrote {out} ({len(sections) // 4} cache states done)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--dir", default="data/models/bench", help="where the model and scratch files go")
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--format", default="gguf", choices=["gguf", "safetensors"])
    ap.add_argument("--layout", default="moe", choices=["dense", "moe"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ceiling-size", default="1GiB")
    ap.add_argument("--ledger", default=None, help="default: a fresh ledger next to the model")
    ap.add_argument("--out", default=None, help="also write the Markdown here")
    args = ap.parse_args(argv)

    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    model = _model(directory, parse_size(args.size), args.format, args.layout)
    ledger = Ledger(args.ledger or directory / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    t0 = time.perf_counter()
    env = collect_environment(str(directory))
    report = measure_ceilings(directory, devices=(args.device,), size=parse_size(args.ceiling_size),
                              ledger=ledger)
    head = [f"# Strategy benchmark — {args.device}, {args.format} {args.layout}, "
            f"{model.stat().st_size / 2**30:.2f} GiB", "", f"Date: {stamp}.",
            f"Runs: {args.runs} per configuration and cache state, fresh worker process each, "
            f"interleaved; device bytes verified after every run. Ledger: `{ledger.path}`.",
            "", "## Ceilings (this machine, measured first)", "", *_ceiling_lines(report),
            "", "## Prediction", "", *_predictions(report, model.stat().st_size, args.device)]
    sections: list[str] = []
    _emit(args.out, head, sections, None)  # written after every phase: a cut-off run keeps its part
    configs = [RunConfig(str(model), name, params, device=args.device) for name, params in CONFIGS]
    device_info = None
    for cache in ("cold", "warm"):
        campaign = f"bench-{args.device}-{cache}"
        results = measure(configs, runs=args.runs, cache=cache, ledger=ledger, campaign=campaign,
                          hypothesis="strategy sweep against the machine's ceilings", progress=_say)
        ok = next((r for a in results for r in a.runs if r.ok), None)
        device_info = device_info or (dict(ok.report.device_info) if ok else None)
        sections += ["", f"## {cache}", "", markdown_table(ledger, campaign)]
        _emit(args.out, head, sections, f"{_machine(env, device_info)}; total wall "
              f"{time.perf_counter() - t0:.0f} s so far")
    print("\n".join(head + sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
