"""The engine A/B benchmark's own parts that need no torch: the model it writes and the commands it runs."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from argparse import Namespace
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench" / "bench_engine_ab.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_engine_ab", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_model_is_a_llama_shaped_bf16_safetensors_file(tmp_path: Path, isolated_cache: Path) -> None:
    from workbench.formats import open_index

    bench = _bench()
    args = Namespace(layers=2, hidden=64, intermediate=96, vocab=128, heads=4, kv_heads=2)
    path = bench.write_model(tmp_path / "m", args)
    index = open_index(path)
    shapes = {t.name: t.shape for t in index.tensors}
    assert len(shapes) == 1 + 2 * 9 + 2 and {t.dtype for t in index.tensors} == {"BF16"}
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == (32, 64)  # 2 kv heads × head_dim 16
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (64, 96) and shapes["lm_head.weight"] == (128, 64)
    assert index.nbytes == 2 * sum(math.prod(s) for s in shapes.values())
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["model_type"] == "llama" and not config["tie_word_embeddings"]
    norm = next(t for t in index.tensors if t.name == "model.norm.weight")
    with open(path, "rb") as fh:
        fh.seek(norm.offset)
        assert fh.read(4) == bytes.fromhex("803f803f")  # bf16 1.0, little-endian
    mtime = os.stat(path).st_mtime_ns
    assert bench.write_model(tmp_path / "m", args) == path and os.stat(path).st_mtime_ns == mtime  # kept


def test_the_two_commands_are_one_build_two_settings(tmp_path: Path, isolated_cache: Path) -> None:
    from workbench.measure.engine.command import build_files, check_command

    bench = _bench()
    a, b = bench.engine_commands(tmp_path, "cuda", sys.executable)
    assert a.cmd.endswith("--load direct") and b.cmd.endswith("--load via-cpu")
    assert a.start_marker and a.phases and a.label == "device_map=cuda" and b.label == "cpu, then .to(cuda)"
    check_command(a)
    assert build_files(a) == build_files(b) and build_files(a)[1] == ("script", str(bench.ENGINE))
