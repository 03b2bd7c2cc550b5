"""Evidence on a real engine (issue 33 §1): Hugging Face transformers ``from_pretrained(…,
device_map=DEVICE)`` on a multi-shard bf16 checkpoint that transformers itself wrote, timed by
``workbench external`` warm and cold (n runs each), with the evidence grade of every run.

    python benchmarks/bench/bench_evidence.py --device cuda --runs 5 --out OUT/evidence.md --json-dir OUT
    python benchmarks/bench/bench_evidence.py --device cpu --layers 1 --hidden 256 --intermediate 512 --vocab 2048 --runs 2

The checkpoint (``LlamaForCausalLM``, ``save_pretrained(max_shard_size=…)``; by default 12 layers of
TinyLlama's width, ≈ 1.33 GB bf16 in 5 shards) is written once under ``--dir``. The engine is
``benchmarks/engines/hf_engine.py --load direct``: the window is its ``load start`` line → ``model
loaded``. The report gives, per cache state, the command's exit status (4: some run had no evidence), each
run's grade and the attempt's median, GB/s and notes — the figures come from the CLI's ``--json``, saved
beside it. Device time on a fresh H200 box: writing the checkpoint ≈ 30 s, each run ≈ 10 s (interpreter,
``import transformers``, CUDA context, load), 2 × 5 runs ≈ 100–150 s.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "benchmarks" / "engines" / "hf_engine.py"


def write_checkpoint(directory: Path, args: argparse.Namespace) -> Path:
    """The checkpoint, written by transformers (once: reused when its config is there)."""
    if (directory / "config.json").exists():
        return directory
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory, max_shard_size=args.shard)
    subprocess.run(["sync"], check=False)  # dirty pages cannot be evicted: the cold runs need them on disk
    return directory


def external(directory: Path, args: argparse.Namespace, cache: str) -> tuple[int, dict]:
    """``workbench external`` on the checkpoint: (exit status, its --json)."""
    cmd = f"{sys.executable} {ENGINE} {directory} --device {args.device} --load direct"
    argv = [sys.executable, "-m", "workbench.cli", "external", "--file", str(directory), "--cmd", cmd,
            "--start-marker", "load start", "--marker", "model loaded", "--runs", str(args.runs),
            "--cache", cache, "--device", args.device.split(":")[0] if args.device != "cpu" else "host",
            "--campaign", f"evidence-{cache}", "--ledger", str(args.dir / "evidence.sqlite"),
            "--timeout", str(args.timeout), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    try:
        data = json.loads(done.stdout)
    except ValueError:
        data = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return done.returncode, data


def section(cache: str, code: int, data: dict) -> list[str]:
    if "runs" not in data:
        return [f"### {cache}", "", f"exit {code}: {data.get('error')}", ""]
    rows = ["| run | load s | grade | evidence |", "|---|---|---|---|"]
    for i, run in enumerate(data["runs"], 1):
        evidence = ((run.get("external") or {}).get("evidence") or {})
        rows.append(f"| {i} | {run.get('load_s') or '—'} | {evidence.get('grade', '—')} | "
                    f"{(run.get('engaged') or [run.get('error') or ''])[0][:200]} |")
    gbps = data.get("gbps")
    return [f"### {cache}", "", f"exit {code}; median {data.get('median_s')} s; "
            f"GB/s {gbps if gbps is not None else '— (time only)'}; n = {data.get('n')}; notes: {data.get('notes')}",
            "", *rows, ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="the engine's device_map: cuda, cuda:N or cpu")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/evidence"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cache", choices=("warm", "cold", "both"), default="both")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--shard", default="300MB", help="save_pretrained's max_shard_size")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown report here too")
    ap.add_argument("--json-dir", type=Path, default=None, help="save each cache state's --json here")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    directory = write_checkpoint(args.dir / "llama", args)
    shards = sorted(directory.glob("*.safetensors"))
    size = sum(p.stat().st_size for p in shards)
    lines = [f"## Evidence on transformers from_pretrained(device_map={args.device!r})", "",
             f"{platform.node()}, Linux {platform.release()}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
             f"UTC; checkpoint by transformers: {len(shards)} shards, {size / 1e9:.2f} GB bf16; n = {args.runs} per cache state", ""]
    for cache in (("warm", "cold") if args.cache == "both" else (args.cache,)):
        code, data = external(directory, args, cache)
        if args.json_dir is not None:
            args.json_dir.mkdir(parents=True, exist_ok=True)
            (args.json_dir / f"evidence-{cache}.json").write_text(json.dumps(data, indent=1))
        lines += section(cache, code, data)
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
