"""The GGUF index inside a load's window, two versions of the workbench side by side.

    python3 benchmarks/bench/bench_gguf_index.py --base 4b10367 --dir /tmp/gguf-index --moe 2GiB --vocab 151936 \\
        --runs 8 --out docs/benchmarks/gguf-index-host

Each run is a fresh interpreter that does what a load's worker does before its window
(``measure/run/worker.py``: the format readers and what they import lazily, ``_import_formats``),
then times ``open_index(FILE)`` — the ``index`` phase of a load — and prints it with a digest of the
index (tensors, blobs, layout, metadata) and the modules imported inside the timing. ``--base REV``
is the workbench at git revision REV (``git archive`` into a temporary directory), against this
checkout; the two run in alternating order (A B, B A, ...), ``--runs`` rounds per file, the file's
header pages warm (read before every run). Both versions must give the same digest on every run.

Files (kept when already there): ``--moe SIZE`` the MoE GGUF ``bench_sizes.py --moe`` loads (synth,
``--layout moe --experts 64 --alignment 64 --seed 11``); ``--vocab N`` a GGUF written by gguf-py's
``GGUFWriter`` with an N-token vocabulary (tokens, token types and as many merges, as real
tokenizers have) and a few small tensors; any ``--file``. Per file: median (min–max) ms of each
version and the speedup median(base) / median(this checkout) with its 95 % interval (bootstrap over
rounds, ``workbench.measure.run.effect.ratio_effect``). Writes OUT.md and OUT.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workbench.measure.run.effect import ratio_effect  # noqa: E402

CHILD = r"""
import hashlib, json, sys, time
import workbench
from workbench.measure.run.worker import _import_formats
_import_formats()
from workbench.formats import open_index
before = set(sys.modules)
t0 = time.perf_counter()
index = open_index(sys.argv[1])
seconds = time.perf_counter() - t0
digest = hashlib.sha256(repr((index, index.metadata)).encode()).hexdigest()[:16]
print(json.dumps({"index_s": seconds, "digest": digest, "tensors": len(index.tensors), "package": workbench.__file__,
                  "window_imports": sorted(set(sys.modules) - before)}))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="git revision to compare this checkout with")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "gguf-index", help="where files are made")
    p.add_argument("--moe", default="", help="size of the MoE GGUF to make and index (e.g. 2GiB)")
    p.add_argument("--vocab", type=int, default=0, help="tokens of the vocabulary GGUF to make and index")
    p.add_argument("--file", action="append", default=[], help="another GGUF to index (repeatable)")
    p.add_argument("--runs", type=int, default=8, help="rounds per file (each version once a round)")
    p.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.json")
    return p.parse_args(argv)


def make_moe(directory: Path, size_text: str) -> Path:
    from workbench.formats.synth import parse_size, write_synthetic

    size = parse_size(size_text)
    path = directory / f"bench-a3b-moe-{size >> 20}MiB.gguf"
    if not path.exists():
        write_synthetic(path, size=size, seed=11, format="gguf", layout="moe", experts=64, alignment=64)
    return path


def make_vocab(directory: Path, n: int) -> Path:
    """gguf-py's writer: an n-token vocabulary (a seventh of the tokens raw bytes, not UTF-8, as byte
    tokens are), n token types, n merges, and 8 small tensors (4 of them stacked experts)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter

    path = directory / f"vocab-{n}.gguf"
    if path.exists():
        return path
    rng, writer = np.random.default_rng(0), GGUFWriter(str(path), "qwen3moe")
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" if i % 7 else bytes([0xE2, 0x96, i % 256]) for i in range(n)])
    writer.add_array("tokenizer.ggml.token_type", [1] * n)
    writer.add_array("tokenizer.ggml.merges", [f"Ġ t{i} x{i % 97}" for i in range(n)])
    writer.add_string("tokenizer.ggml.model", "gpt2")
    for layer in range(4):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", rng.standard_normal((64, 64)).astype(np.float16))
        writer.add_tensor(f"blk.{layer}.ffn_up_exps.weight", rng.integers(0, 255, (8, 64, 68), dtype=np.uint8),
                          raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def extract(rev: str, into: Path) -> Path:
    """The ``workbench`` package at ``rev``, unpacked under ``into`` (a PYTHONPATH entry)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "workbench"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def warm_header(path: Path) -> None:
    """Bring the header pages (what the index reads) into the page cache: the first 16 MiB."""
    with open(path, "rb") as f:
        while f.tell() < 16 << 20 and f.read(1 << 20):
            pass


def one_run(tree: Path, path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path.resolve())], env=env, capture_output=True, text=True,
                         check=True, timeout=300, cwd=tempfile.gettempdir())  # not a checkout: -c imports from cwd
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if not Path(report["package"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the run meant for {tree} imported {report['package']}")
    return report


def measure_file(path: Path, trees: dict[str, Path], runs: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    names = list(trees)
    for k in range(runs):
        for name in (names if k % 2 == 0 else names[::-1]):
            warm_header(path)
            samples[name].append(one_run(trees[name], path))
    digests = {r["digest"] for rs in samples.values() for r in rs}
    if len(digests) != 1:
        raise SystemExit(f"{path}: the two versions give different indexes ({sorted(digests)})")
    secs = {name: [r["index_s"] for r in rs] for name, rs in samples.items()}
    effect = ratio_effect(secs["base"], secs["this"], paired=True)
    imported = {name: sorted({m for r in rs for m in r["window_imports"]}) for name, rs in samples.items()}
    return {"file": str(path), "size": path.stat().st_size, "tensors": samples["this"][0]["tensors"],
            "digest": digests.pop(), "runs": runs, "seconds": secs, "effect": effect.to_json(),
            "effect_text": str(effect), "window_imports": imported}


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "") if Path("/proc/cpuinfo").exists() else ""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"host": platform.node(), "kernel": platform.release(), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "commit": commit, "load": os.getloadavg()}


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.2f} ({min(values) * 1e3:.2f}–{max(values) * 1e3:.2f})"


def markdown(summary: dict[str, Any]) -> str:
    m = summary["machine"]
    lines = [f"Date {summary['date']} · {m['cpu']}, {m['cores']} cores · Python {m['python']} · this checkout "
             f"{m['commit']} against {summary['base']} · load average before {m['load'][0]:.2f}", "",
             "| file | bytes | tensors | runs | base ms, median (min–max) | this ms | speedup [95 % interval] |",
             "|---|---:|---:|---:|---|---|---|"]
    for f in summary["files"]:
        lines.append(f"| {Path(f['file']).name} | {f['size']:,} | {f['tensors']} | {f['runs']} | "
                     f"{ms(f['seconds']['base'])} | {ms(f['seconds']['this'])} | {f['effect_text']} "
                     f"({f['effect']['verdict']}) |")
    imports = {name for f in summary["files"] for rs in f["window_imports"].values() for name in rs}
    lines += ["", f"Modules imported inside the timing: {', '.join(sorted(imports)) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    files = ([make_moe(args.dir, args.moe)] if args.moe else []) + \
        ([make_vocab(args.dir, args.vocab)] if args.vocab else []) + [Path(f) for f in args.file]
    if not files:
        raise SystemExit("nothing to index: give --moe, --vocab or --file")
    with tempfile.TemporaryDirectory(prefix="gguf-index-base-") as tmp:
        trees = {"base": extract(args.base, Path(tmp)), "this": ROOT}
        summary = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
                   "base": args.base, "files": [measure_file(p, trees, args.runs) for p in files]}
    text = markdown(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
