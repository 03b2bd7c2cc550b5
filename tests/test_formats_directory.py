"""A directory means what the Hub's loaders take from it (issue 23 §1): ``model.safetensors.index.json``,
else ``model.safetensors``, else one complete shard set, else the only file; GGUF one split set or one
file, never llama.cpp's ``mmproj-*`` projector. Adapters, dtype variants and ``consolidated.*`` beside
the model are not part of it; anything ambiguous is one line naming the candidates. The files are
written by huggingface_hub (``save_torch_state_dict``), safetensors' own writer and gguf-py.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from directory_helpers import files_of, refused
from foreign_writers import split_names, write_gguf_split, write_hub_checkpoint
from workbench.cli import main
from workbench.formats import open_index
from workbench.io.envinfo import eviction_support
from workbench.io.pagecache import evict_file_pages, resident_fraction, warm_file
from workbench.ledger import Ledger

ST_INDEX = "model.safetensors.index.json"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


def st_file(path: Path, prefix: str = "model.layers.0", seed: int = 0, dtype=np.float32,
            shape: tuple[int, ...] = (7, 13)) -> dict[str, np.ndarray]:
    """safetensors' own writer (``safetensors.numpy.save_file``): three tensors, written back to disk."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    tensors = {f"{prefix}.{p}_proj.weight": rng.standard_normal(shape).astype(dtype) for p in "qkv"}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
    fd = os.open(path, os.O_RDONLY)
    try:  # dirty pages cannot be evicted
        os.fsync(fd)
    finally:
        os.close(fd)
    return tensors


def peft_adapter(directory: Path, shape: tuple[int, ...] = (7, 13)) -> None:
    """What PEFT's ``save_pretrained`` leaves: ``adapter_model.safetensors`` and ``adapter_config.json``."""
    st_file(directory / "adapter_model.safetensors", "base_model.model.model.layers.0.self_attn.q_proj.lora_A",
            seed=9, shape=shape)
    (directory / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))


@pytest.fixture
def hub(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    return tmp_path / "ckpt"


# --- safetensors -------------------------------------------------------------------------------------


def test_an_adapter_beside_the_model_is_not_part_of_it(tmp_path):
    st_file(tmp_path / "m" / "model.safetensors")
    peft_adapter(tmp_path / "m")
    index = open_index(tmp_path / "m")
    assert files_of(tmp_path / "m") == ["model.safetensors"] and not index.sharded
    assert not any("lora" in t.name for t in index)
    assert files_of(tmp_path / "m" / "adapter_model.safetensors") == ["adapter_model.safetensors"]  # named: taken


def test_files_beside_the_model_are_never_read_evicted_or_hashed(tmp_path, monkeypatch):
    """Observed from outside: the adapter's page-cache residency through a cold run and a warm run of
    the directory, and the identity cache's rows (every file hashed has one)."""
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    for var, name in (("WORKBENCH_LEDGER", "ledger.sqlite"), ("WORKBENCH_LOCK_DIR", "locks")):
        monkeypatch.setenv(var, str(tmp_path / name))
    d = tmp_path / "m"
    st_file(d / "model.safetensors", shape=(64, 1024))
    peft_adapter(d, shape=(64, 1024))
    adapter = d / "adapter_model.safetensors"
    # the identity cache keeps no hash taken within 1 s of a file's last change (its ctime: issue 35 §4)
    time.sleep(max(0.0, (d / "model.safetensors").stat().st_ctime + 1.2 - time.time()))

    def run(cache: str) -> None:
        out = CliRunner().invoke(main, ["run", str(d), "--strategy", "pread", "--runs", "1", "--cache", cache])
        assert out.exit_code == 0, out.output

    warm_file(adapter)
    run("cold")  # the model's file is evicted and checked; the adapter is not touched
    assert resident_fraction(adapter) >= 0.98
    evict_file_pages(adapter)
    run("warm")  # the model's file is read; the adapter is not
    assert resident_fraction(adapter) <= 0.02 and resident_fraction(d / "model.safetensors") >= 0.98
    with sqlite3.connect(tmp_path / "cache" / "identity.sqlite") as conn:
        hashed = {row[0] for row in conn.execute("SELECT realpath FROM file_hash")}
    assert hashed == {os.path.realpath(d / "model.safetensors")}
    with Ledger(tmp_path / "ledger.sqlite") as ledger:  # the files whose state each run set and checked
        assert [set(r) for r in ledger.runs()["resident_files"]] == [{"model.safetensors"}] * 2


def test_a_dtype_variant_beside_the_model_is_not_part_of_it(tmp_path):
    st_file(tmp_path / "m" / "model.safetensors")
    st_file(tmp_path / "m" / "model.fp16.safetensors", dtype=np.float16)  # the same tensor names
    assert files_of(tmp_path / "m") == ["model.safetensors"]
    os.unlink(tmp_path / "m" / "model.safetensors")
    # a lone variant is not what transformers loads without variant= (issue 33 §3): refused, named, and
    # measured when named
    refused(tmp_path / "m", "only dtype variants (fp16: model.fp16.safetensors)", "variant=",
            str(tmp_path / "m" / "model.fp16.safetensors"))
    assert files_of(tmp_path / "m" / "model.fp16.safetensors") == ["model.fp16.safetensors"]
    st_file(tmp_path / "m" / "model.bf16.safetensors")
    line = refused(tmp_path / "m", "only dtype variants", "bf16: model.bf16.safetensors", "fp16: model.fp16.safetensors")
    assert "a tensor lives in one file" not in line


def test_a_hub_sharded_checkpoint_beside_a_consolidated_file_is_the_set(hub):
    write_hub_checkpoint(hub, seed=1)
    st_file(hub / "consolidated.safetensors")
    shards = sorted(p.name for p in hub.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 3 and files_of(hub) == shards
    assert open_index(hub).index_file == str(hub / ST_INDEX)
    os.unlink(hub / ST_INDEX)  # the one complete set, found by its names
    assert files_of(hub) == shards and open_index(hub).index_file == ""


def test_a_variant_set_resolves_through_its_own_index(hub):
    write_hub_checkpoint(hub, seed=2, filename_pattern="model.fp16{suffix}.safetensors")
    # a directory of one variant is not what transformers loads without variant= (issue 33 §3)
    refused(hub, "only dtype variants (fp16: model.fp16.safetensors.index.json", "variant=")
    index = open_index(hub / "model.fp16.safetensors.index.json")
    assert index.index_file == str(hub / "model.fp16.safetensors.index.json") and index.sharded
    named = open_index(index.files[1].path)  # a shard brings its set's index, checked against it
    assert named.index_file == index.index_file and files_of(named.path) == files_of(index.index_file)


def test_two_complete_shard_sets_are_refused_with_both_named(hub):
    write_hub_checkpoint(hub, seed=1, filename_pattern="base{suffix}.safetensors")
    write_hub_checkpoint(hub, seed=2, filename_pattern="chat{suffix}.safetensors")
    refused(hub, "2 candidates", "base-0000i-of-", "chat-0000i-of-", "name one")
    for stem in ("base", "chat"):
        os.unlink(hub / f"{stem}.safetensors.index.json")
    refused(hub, "2 candidates", "base-0000i-of-", "chat-0000i-of-")
    first = sorted(hub.glob("chat-*.safetensors"))[0]
    assert all(os.path.basename(f).startswith("chat-") for f in files_of(first))  # naming one takes it


def test_an_incomplete_set_beside_a_single_file_is_refused(hub):
    write_hub_checkpoint(hub, seed=1)
    os.unlink(hub / ST_INDEX)
    last = sorted(hub.glob("model-*-of-*.safetensors"))[-1]
    os.unlink(last)
    st_file(hub / "consolidated.safetensors")
    refused(hub, "incomplete", f"missing {last.name}", "consolidated.safetensors")
    os.unlink(hub / "consolidated.safetensors")
    refused(hub, last.name, "missing shard")  # the set alone: it says what it lacks


def test_a_pickle_only_directory_says_why_it_is_not_loaded(hub):
    write_hub_checkpoint(hub, seed=1, safe_serialization=False)
    assert any(p.name.startswith("pytorch_model") and p.suffix == ".bin" for p in hub.iterdir())
    line = refused(hub, "pickle", "arbitrary code", "safetensors")
    assert "no model in it" not in line


# --- GGUF ----------------------------------------------------------------------------------------------


def test_a_projector_beside_a_gguf_never_joins_it(tmp_path):
    d = tmp_path / "vlm"
    d.mkdir()
    write_gguf_split(d / "model-Q8_0.gguf", seed=1, split_max_tensors=0)
    write_gguf_split(d / "mmproj-model-f16.gguf", seed=2, split_max_tensors=0, n=4)
    assert files_of(d) == ["model-Q8_0.gguf"]
    os.unlink(d / "model-Q8_0.gguf")
    write_gguf_split(d / "model.gguf", seed=3, split_max_tensors=4)
    assert files_of(d) == [p.name for p in split_names(d / "model.gguf")]  # a split set, the projector beside
    for split in split_names(d / "model.gguf"):
        os.unlink(split)
    refused(d, "multimodal projector", "mmproj-model-f16.gguf")


def test_several_gguf_models_are_refused_with_the_candidates(tmp_path):
    d = tmp_path / "quants"
    d.mkdir()
    write_gguf_split(d / "m-Q4_K_M.gguf", seed=1, split_max_tensors=0)
    write_gguf_split(d / "m-Q8_0.gguf", seed=2, split_max_tensors=4)
    refused(d, "2 candidates", "m-Q4_K_M.gguf", "m-Q8_0-0000i-of-", "name one")
    assert files_of(d / "m-Q4_K_M.gguf") == ["m-Q4_K_M.gguf"]
