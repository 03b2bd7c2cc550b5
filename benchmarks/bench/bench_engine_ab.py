"""Engine A/B benchmark: a real engine (Hugging Face transformers) loading a local Llama-shaped bf16 model
onto a device, two loader settings compared the way the first write-up compared two engine builds —
``workbench external`` with two commands, fresh process per run, interleaved, the page cache set and
checked before every run, the engine's own phase lines read out, the verdict with its interval.

    python benchmarks/bench/bench_engine_ab.py --device cuda --out docs/benchmarks/engine-ab-h200.md \\
        --export data/ledgers/h200-engine-ab
    python benchmarks/bench/bench_engine_ab.py --device cpu --layers 2 --hidden 512 --intermediate 1408 --runs 3

No network: the model directory (``config.json`` + one ``model.safetensors``) is written here, with
deterministic pseudo-random bf16 weights; by default TinyLlama's shape with 20 layers, 1.03 B parameters,
2.07 GB. A = ``device_map=DEVICE`` (weights materialized on the device), B = load on the CPU then
``.to(DEVICE)``. The load window is the engine's ``load start`` line → ``model loaded``; spawn → loaded
(interpreter, imports, CUDA context included) is kept as each run's wall.

Device time: a run costs the interpreter, ``import transformers`` and the CUDA context (≈ 8–10 s on the
H200 box) plus the load; 5 runs × 2 commands × one cache state ≈ 2 minutes. ``--cache both`` doubles it.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.ledger import Ledger, export_csv, markdown_table  # noqa: E402
from workbench.measure.run.environment import collect_environment  # noqa: E402
from workbench.measure.engine.external import EngineCommand, measure_engines  # noqa: E402
from workbench.measure.run.tables import phases_table  # noqa: E402

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "hf_engine.py"
PHASE = r"phase (?P<name>\w+): (?P<ms>[0-9.]+) ms"
BLOCK = 1 << 24  # bf16 values generated once and repeated through every matrix


def llama_tensors(layers: int, hidden: int, intermediate: int, vocab: int, heads: int, kv_heads: int):
    """(name, shape) of every tensor of a LlamaForCausalLM with untied embeddings."""
    kv = hidden // heads * kv_heads
    out = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", (hidden, hidden)), (p + "self_attn.k_proj.weight", (kv, hidden)),
                (p + "self_attn.v_proj.weight", (kv, hidden)), (p + "self_attn.o_proj.weight", (hidden, hidden)),
                (p + "mlp.gate_proj.weight", (intermediate, hidden)), (p + "mlp.up_proj.weight", (intermediate, hidden)),
                (p + "mlp.down_proj.weight", (hidden, intermediate)), (p + "input_layernorm.weight", (hidden,)),
                (p + "post_attention_layernorm.weight", (hidden,))]
    return out + [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]


def write_model(directory: Path, args: argparse.Namespace, sync: bool = True) -> Path:
    """config.json + model.safetensors (bf16), written once; returns the safetensors file. ``sync``
    writes it back to disk (dirty pages cannot be evicted, so a cold run needs it; warm ones do not)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": args.hidden,
              "intermediate_size": args.intermediate, "num_hidden_layers": args.layers,
              "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads, "vocab_size": args.vocab,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16"}
    path = directory / "model.safetensors"
    written = directory / "config.json"  # written last: its presence means the weights are whole
    if path.exists() and written.exists() and json.loads(written.read_text() or "{}") == config:
        if sync:  # written by a warm-only run: its pages may still be dirty
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        return path
    tensors = llama_tensors(args.layers, args.hidden, args.intermediate, args.vocab, args.heads, args.kv_heads)
    header, offset = {}, 0
    for name, shape in tensors:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    values = np.random.default_rng(7).normal(0, 0.02, BLOCK).astype(np.float32)
    block = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # bf16: the top half of a float32
    ones = np.full(BLOCK, 0x3F80, dtype=np.uint16).tobytes()  # 1.0: the norms' weights
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as fh:
        fh.write(len(text).to_bytes(8, "little") + text)
        for name, shape in tensors:
            left, fill = 2 * int(np.prod(shape)), ones if name.endswith("norm.weight") else block
            while left:
                fh.write(fill[:min(left, len(fill))])
                left -= min(left, len(fill))
        fh.flush()
        if sync:
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return path


def machine_line(directory: Path, python: str) -> str:
    env = collect_environment(str(directory))
    gpu = ""
    try:  # nvidia-smi, not the CUDA runtime: the parent must not hold a context on the measured GPU
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().replace("\n", "; ")
    except (OSError, subprocess.SubprocessError):
        pass
    versions = ", ".join(f"{p} {_version(python, p)}" for p in ("torch", "transformers", "safetensors", "accelerate"))
    return (f"{env.get('hostname')} ({env.get('cpu_model')}, {env.get('cores')} cores, "
            f"{env.get('ram_bytes', 0) / 2**30:.0f} GiB RAM, {env.get('fs_type')} on {env.get('fs_source')}, "
            f"{env.get('kernel')})" + (f"; GPU {gpu}" if gpu else "") + f"; engine Python {_python_version(python)}, "
            + versions)


def _python_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip() or "?"


def _version(python: str, package: str) -> str:
    """The package's version in the engine's interpreter (asked without importing the package)."""
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.strip() or "not installed"


def engine_commands(model_dir: Path, device: str, python: str) -> list[EngineCommand]:
    base = [python, str(ENGINE), str(model_dir), "--device", device]
    common = dict(start_marker=r"\] load start$", phases=(PHASE,))
    return [EngineCommand(shlex.join([*base, "--load", "direct"]), r"model loaded", label=f"device_map={device}",
                          **common),
            EngineCommand(shlex.join([*base, "--load", "via-cpu"]), r"model loaded",
                          label=f"cpu, then .to({device})", **common)]


def section(ledger: Ledger, campaign: str, results: list) -> list[str]:
    walls = [r.wall_s for a in results for r in a.runs if r.ok]
    lines = ["", f"### {campaign}", "", markdown_table(ledger, campaign), "",
             "Engine phases (median ms per attempt; `unattributed` in the figures is spawn → loaded minus them):",
             "", "```", phases_table(results), "```"]
    for r in results:
        if r.verdict != "baseline":
            why = "; ".join(filter(None, [r.verdict_reason, f"n = {r.stats.n}"]))
            lines.append(f"\n**{r.label} vs the baseline**: {r.effect} — {r.verdict} ({why}).")
    if walls:
        lines.append(f"\nSpawn → loaded (the wall, imports and CUDA context included): median "
                     f"{np.median(walls):.2f} s over {len(walls)} runs.")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="the engine's device: cuda, cuda:N or cpu")
    ap.add_argument("--dir", default="/tmp/engine-ab", help="where the model directory and the ledger go")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cache", choices=("warm", "cold", "both"), default="warm")
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs the engine (one with torch and transformers)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds before a run is killed")
    ap.add_argument("--out", default=None, help="write the Markdown here too")
    ap.add_argument("--export", default=None, help="write attempts.csv / runs.csv / attempts.md here")
    args = ap.parse_args(argv)

    t0, stamp = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    directory = Path(args.dir)
    model = write_model(directory / "llama-bf16", args, sync=args.cache != "warm")
    print(f"[bench] model {model} ({model.stat().st_size / 1e9:.2f} GB) after {time.perf_counter() - t0:.1f} s",
          file=sys.stderr, flush=True)
    ledger = Ledger(directory / f"engine-ab-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    device = "host" if args.device == "cpu" else args.device  # the workbench's name for the lock and record
    head = [f"# Engine A/B — transformers on {args.device}: device_map vs CPU then .to()", "",
            f"**Date** {stamp} · **Machine** {machine_line(directory, args.python)}", "",
            f"**Model** Llama-shaped bf16, {args.layers} layers, hidden {args.hidden}, intermediate "
            f"{args.intermediate}, vocab {args.vocab}: `{model}` ({model.stat().st_size / 1e9:.2f} GB, one file), "
            f"written by this script (no network).", "",
            f"**Command** `python benchmarks/bench/bench_engine_ab.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
            f" — {args.runs} fresh-process runs per command and cache state, interleaved A B B A (the default order, abba), load window "
            "`load start` → `model loaded` (the engine's own lines), process group killed at the marker."]
    sections: list[str] = []
    for cache in (("warm", "cold") if args.cache == "both" else (args.cache,)):
        campaign = f"engine-ab-{args.device}-{cache}"
        results = measure_engines(engine_commands(model.parent, args.device, args.python), str(model), runs=args.runs,
                                  cache=cache, device=device, timeout_s=args.timeout, ledger=ledger,
                                  campaign=campaign, hypothesis="device_map straight to the device vs CPU then .to()",
                                  progress=_say)
        sections += section(ledger, campaign, results)
    sections.append(f"\nTotal wall of the benchmark: {time.perf_counter() - t0:.0f} s. Ledger: `{ledger.path}`.")
    text = "\n".join(head + sections) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    if args.export:
        export_csv(ledger, Path(args.export) / "attempts.csv")
        (Path(args.export) / "attempts.md").write_text(markdown_table(ledger) + "\n", encoding="utf-8")
    print(text)
    return 0


def _say(done: int, total: int, config, run) -> None:
    took = "FAILED " + str(run.error)[:200] if run.error else f"window {run.load_s:.2f} s, wall {run.wall_s:.2f} s"
    print(f"[bench] {done}/{total} {config.display}: {took}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
