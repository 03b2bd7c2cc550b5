"""The evidence corpus (issue 33): every real loading pattern is credited warm and cold — ``bytes-read``
or ``mapping-touched``, and so a GB/s — and no fake ever is, each on files written by foreign writers
(the safetensors library, gguf-py, huggingface_hub), through :func:`time_external` as ``workbench
external`` runs an engine. The patterns are ``tests/engines/corpus_engine.py``'s."""
from __future__ import annotations

import importlib.util
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.measure.engine.external import time_external
from workbench.measure.engine.target import ReadTarget
from workbench.records.external import CREDITED

ENGINE = Path(__file__).parent / "engines" / "corpus_engine.py"
_spec = importlib.util.spec_from_file_location("corpus_engine", ENGINE)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

FAKE_GRADES = {"dev_zero": {"none"}, "a_copy": {"none"}, "populate_only": {"mapped-only"},
               "madv_populate_only": {"mapped-only"}, "mapped_untouched": {"mapped-only"},
               "sendfile_devnull": {"opened-only"}, "seek_end_then_dev_zero": {"opened-only"},
               "header_only": {"opened-only"}, "readahead_only": {"opened-only"},
               # its open comes after the marker: seen or not by the last look, never credited
               "marker_before_reading": {"none", "opened-only"}, "nothing": {"none"}}
MODEL_FOR = {"gguf_reader": "gguf", "mmap_shards_in_turn": "set", "transformers_cpu": "hf"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """4 MiB models by foreign writers: a safetensors file (and a copy of it), a GGUF file, a 3-shard set."""
    from safetensors.numpy import save_file

    tmp = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(33)
    arrays = {f"layer.{i}.weight": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(4)}
    save_file(arrays, str(tmp / "model.safetensors"))
    shutil.copyfile(tmp / "model.safetensors", tmp / "copy.safetensors")
    out = {"st": tmp / "model.safetensors", "copy": tmp / "copy.safetensors", "gguf": tmp / "model.gguf",
           "set": tmp / "set"}
    _write_gguf(out["gguf"], arrays)
    _write_set(out["set"], arrays)
    if importlib.util.find_spec("transformers") is not None:
        out["hf"] = _write_transformers(tmp / "hf")
    return out


def _write_gguf(path: Path, arrays: dict[str, np.ndarray]) -> None:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    for name, array in arrays.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_set(directory: Path, arrays: dict[str, np.ndarray]) -> None:
    import torch
    from huggingface_hub import save_torch_state_dict

    directory.mkdir()
    state = {name: torch.from_numpy(a.copy()) for name, a in arrays.items()}
    save_torch_state_dict(state, str(directory), max_shard_size="2MB")
    assert len(list(directory.glob("*.safetensors"))) > 1


def _write_transformers(directory: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=2048)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def run_pattern(name: str, models: dict[str, Path], cache: str):
    """One run of ``name`` against its model with the cache ``cold`` or ``warm``: (evidence, bytes)."""
    from workbench.errors import CacheStateError
    from workbench.io.modelcache import prepare_model

    key = MODEL_FOR.get(name, "st")
    if key not in models:
        pytest.skip(f"{name}: transformers is not installed")
    target = ReadTarget.of(str(models[key]))
    try:
        prepare_model(str(models[key]), cache)
    except CacheStateError as exc:
        pytest.skip(f"{cache} unreachable here: {exc}")
    cmd = " ".join(shlex.quote(str(w)) for w in (sys.executable, ENGINE, name, models[key], models["copy"]))
    out = time_external(cmd, "loaded", timeout_s=120, nbytes=target.nbytes, model=target)
    assert out.error is None, out.error
    return out.report.external.evidence, out.bytes


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("name", [f.__name__ for f in corpus.REAL])
def test_a_real_loader_is_credited(models: dict[str, Path], name: str, cache: str) -> None:
    evidence, nbytes = run_pattern(name, models, cache)
    assert evidence.source == "events", evidence.source  # this machine records the window as events
    assert evidence.grade in CREDITED and nbytes == evidence.model_bytes, evidence.describe()
    assert evidence.describe().startswith(f"engine read {evidence.model} ({evidence.grade}): ")


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("name", [f.__name__ for f in corpus.FAKE])
def test_a_fake_is_never_credited(models: dict[str, Path], name: str, cache: str) -> None:
    evidence, nbytes = run_pattern(name, models, cache)
    assert evidence.source == "events", evidence.source
    assert evidence.grade in FAKE_GRADES[name] and nbytes == 0, evidence.describe()
    assert evidence.describe().startswith(f"no evidence the engine read {evidence.model} ({evidence.grade}: ")
