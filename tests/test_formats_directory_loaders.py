"""The checkpoint the loaders would load, and the files left out shown (issue 33 §3).

- ``model.safetensors`` beside ``model.safetensors.index.json`` (or beside a complete shard set): the
  loaders disagree (transformers takes the file, vLLM the index's files), so a directory is refused in one
  line naming both and how to name one; either, named, is measured.
- Variants follow transformers' ``variant=``: a directory of variants only is refused (transformers
  loads none without ``variant=``); named — the file, its index or any shard — a variant is measured, a
  set through its own variant index.
- ``inspect`` (text and ``--json``) and the header of ``run`` list the files resolved and those left out.
- Two identities never share one name in a ledger; ``external --device cuda`` follows ``run``'s rule.

Directories are written by huggingface_hub (``save_torch_state_dict``, ``split_torch_state_dict_into_shards``),
the safetensors library and gguf-py.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from directory_helpers import files_of, refused
from foreign_writers import hub_state_dict, write_gguf_split, write_hub_checkpoint
from workbench.cli import main
from workbench.formats import open_index
from workbench.formats.resolve import resolve_model
from workbench.io.envinfo import eviction_support
from workbench.ledger import Ledger
from workbench.records.model_names import distinct_model_names
from workbench.output.untrusted import for_markdown

ST_INDEX = "model.safetensors.index.json"


@pytest.fixture(autouse=True)
def private(tmp_path, monkeypatch):
    for var, name in (("WORKBENCH_CACHE_DIR", "cache"), ("WORKBENCH_LEDGER", "ledger.sqlite"),
                      ("WORKBENCH_LOCK_DIR", "locks")):
        monkeypatch.setenv(var, str(tmp_path / name))


@pytest.fixture
def hub(tmp_path) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    return tmp_path / "ckpt"


def single_file(path: Path, seed: int = 0) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({f"w{i}": rng.standard_normal((5, 7 + i)).astype(np.float32) for i in range(3)}, str(path))


def transformers_variant(directory: Path, variant: str, pattern: str) -> list[str]:
    """What transformers' ``save_pretrained(variant=...)`` writes for a sharded model, through
    huggingface_hub's ``split_torch_state_dict_into_shards``: the shards (``pattern``) by the safetensors
    library, and the index under transformers' variant name ``model.safetensors.index.<variant>.json``."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    state = hub_state_dict(seed=5)
    split = split_torch_state_dict_into_shards(state, filename_pattern=pattern, max_shard_size=2000)
    directory.mkdir(parents=True, exist_ok=True)
    for filename, names in split.filename_to_tensors.items():
        save_file({n: state[n].contiguous() for n in names}, str(directory / filename))
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    (directory / f"model.safetensors.index.{variant}.json").write_text(json.dumps(index))
    return sorted(split.filename_to_tensors)


def test_a_single_file_beside_an_index_is_refused_naming_both(hub):
    write_hub_checkpoint(hub, seed=1)
    shards = sorted(p.name for p in hub.glob("model-*-of-*.safetensors"))
    single_file(hub / "model.safetensors")
    refused(hub, "model.safetensors and model.safetensors.index.json", "loaders disagree",
            str(hub / "model.safetensors"), str(hub / ST_INDEX))
    assert files_of(hub / ST_INDEX) == shards  # named, either is the model
    assert files_of(hub / "model.safetensors") == ["model.safetensors"]
    os.unlink(hub / ST_INDEX)  # the file beside a complete set found by its names: refused as well
    refused(hub, "model.safetensors and model-0000i-of-", "name one", str(hub / shards[0]))


def test_a_directory_of_a_variant_is_refused_and_the_variant_named_is_one_set(hub):
    shards = transformers_variant(hub, "fp16", "model.fp16{suffix}.safetensors")
    assert len(shards) >= 3 and all(s.startswith("model.fp16-") for s in shards)
    index = str(hub / "model.safetensors.index.fp16.json")
    refused(hub, "only dtype variants (fp16: model.safetensors.index.fp16.json", 'variant="<name>"', index)
    assert files_of(index) == shards and open_index(index).index_file == index
    named = open_index(hub / shards[1])  # a shard brings its set's variant index
    assert named.index_file == index and files_of(named.path) == shards


def test_plain_named_shards_under_a_variant_index_are_that_variant(hub):
    shards = transformers_variant(hub, "fp16", "model{suffix}.safetensors")
    index = str(hub / "model.safetensors.index.fp16.json")
    line = refused(hub, "only dtype variants (fp16: model.safetensors.index.fp16.json", index)
    assert "2 candidates" not in line
    named = open_index(hub / shards[0])  # not two candidates: the set of its own index
    assert named.index_file == index and files_of(named.path) == shards


def test_a_lone_variant_file_is_refused_and_measured_when_named(tmp_path):
    single_file(tmp_path / "m" / "model.fp16.safetensors")
    refused(tmp_path / "m", "only dtype variants (fp16: model.fp16.safetensors)",
            str(tmp_path / "m" / "model.fp16.safetensors"))
    assert files_of(tmp_path / "m" / "model.fp16.safetensors") == ["model.fp16.safetensors"]


def test_inspect_and_the_run_header_list_the_files_resolved_and_left_out(hub, tmp_path):
    write_hub_checkpoint(hub, seed=2)
    shards = sorted(p.name for p in hub.glob("model-*-of-*.safetensors"))
    single_file(hub / "adapter_model.safetensors", seed=3)
    transformers_variant(hub, "fp16", "model.fp16{suffix}.safetensors")
    (hub / "mmproj-f16.gguf").write_bytes(b"GGUF")
    assert [x[0] for x in resolve_model(hub).left_out] == [
        "adapter_model.safetensors", "mmproj-f16.gguf", "model.fp16-0000i-of-%05d.safetensors (%d files)"
        % (len(list(hub.glob("model.fp16-*"))), len(list(hub.glob("model.fp16-*")))),
        "model.safetensors.index.fp16.json"]
    out = CliRunner().invoke(main, ["inspect", str(hub), "--no-hash"])
    assert out.exit_code == 0, out.output
    assert all(s in out.output for s in shards) and "(index model.safetensors.index.json)" in out.output
    assert "left out    adapter_model.safetensors: a PEFT adapter" in out.output
    assert 'left out    model.safetensors.index.fp16.json: the fp16 variant: transformers loads it only with ' \
           'variant="fp16"' in out.output
    report = json.loads(CliRunner().invoke(main, ["inspect", str(hub), "--no-hash", "--json"]).output)
    assert [f["name"] for f in report["files"]] == shards
    assert {x["name"]: x["why"] for x in report["left_out"]}["mmproj-f16.gguf"] == "a multimodal projector"
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    out = CliRunner().invoke(main, ["run", str(hub), "--strategy", "pread", "--runs", "1", "--cache", "warm"])
    assert out.exit_code == 0, out.output
    header = out.output[out.output.index("model: "):].splitlines()[:3]
    assert header[1] == f"  resolved: model.safetensors.index.json → model-0000i-of-{len(shards):05d}.safetensors " \
                        f"({len(shards)} files)"
    assert header[2].startswith("  left out: adapter_model.safetensors (a PEFT adapter); mmproj-f16.gguf")


def test_three_models_of_one_name_are_told_apart_in_the_ledger(hub, tmp_path):
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    pytest.importorskip("gguf")
    from workbench.formats.synth import write_synthetic

    gguf_file = tmp_path / "tiny-llama-f16.gguf"
    write_synthetic(gguf_file, format="gguf", layout="dense", size=1 << 20)
    gguf_set = tmp_path / "tiny-llama-f16"
    gguf_set.mkdir()
    write_gguf_split(gguf_set / "model.gguf", seed=1)
    st_set = tmp_path / "other" / "tiny-llama-f16"
    write_hub_checkpoint(st_set, seed=1)
    for model in (gguf_file, gguf_set, st_set):
        out = CliRunner().invoke(main, ["run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "warm"])
        assert out.exit_code == 0, out.output
    listing = CliRunner().invoke(main, ["ledger", "list"]).output.splitlines()[1:]
    names = [line.split("  ")[3].strip() for line in (" ".join(l.split(" ")) for l in listing)]
    assert len(set(n for n in names)) == 3, listing
    assert any("tiny-llama-f16 [gguf, 1 file, #" in l for l in listing)
    assert any("tiny-llama-f16 [gguf, 3 files, #" in l or "tiny-llama-f16 [gguf, 2 files, #" in l for l in listing)
    assert any("tiny-llama-f16 [safetensors, " in l for l in listing)
    csv = CliRunner().invoke(main, ["ledger", "export", "--csv", "-"]).output
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        models = list(ledger.attempts()["model"])
    assert len(set(models)) == 3 and all(m in csv for m in models)
    md = CliRunner().invoke(main, ["ledger", "export", "--markdown", "-"]).output.splitlines()
    table = [line for line in md if line.startswith("| ")]
    assert table[0].startswith("| attempt | model | change |")  # several models: each row names its own
    assert sorted(row.split(" | ")[1] for row in table[2:]) == sorted(map(for_markdown, models))


def test_names_are_told_apart_only_where_two_identities_share_one():
    names = distinct_model_names([("/a/tiny.gguf", "xxh3_128:e461f0f69ac0", 1),
                                  ("/b/tiny/model.safetensors.index.json", "set:xxh3_128:53fb9eab", 3),
                                  ("/c/other.gguf", "xxh3_128:0123", 1), ("/c/other.gguf", "xxh3_128:0123", 1),
                                  ("/d/tiny/model.safetensors.index.json", "set:xxh3_128:53fb9eab", 3)])
    assert names[("/a/tiny.gguf", "xxh3_128:e461f0f69ac0")] == "tiny [gguf, 1 file, #e461f0f6]"
    assert names[("/b/tiny/model.safetensors.index.json", "set:xxh3_128:53fb9eab")] == \
        "tiny [safetensors, 3 files, #53fb9eab]"  # one identity at two paths: one name
    assert names[("/d/tiny/model.safetensors.index.json", "set:xxh3_128:53fb9eab")] == \
        "tiny [safetensors, 3 files, #53fb9eab]"
    assert names[("/c/other.gguf", "xxh3_128:0123")] == "other"


def test_external_on_a_device_not_here_is_refused_like_run(tmp_path):
    from workbench.upload import device_availability

    if device_availability("cuda"):
        pytest.skip("this machine has CUDA")
    single_file(tmp_path / "m.safetensors")
    for args in (["run", str(tmp_path / "m.safetensors"), "--strategy", "pread"],
                 ["external", "--cmd", "true", "--marker", "x", "--file", str(tmp_path / "m.safetensors")]):
        out = CliRunner().invoke(main, [*args, "--device", "cuda", "--runs", "1"])
        assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
        assert "device backend 'cuda' unavailable" in out.output
    assert not (tmp_path / "ledger.sqlite").exists()  # nothing recorded
