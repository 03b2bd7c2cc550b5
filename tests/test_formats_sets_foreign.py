"""Sharded checkpoints written by other people's code — huggingface_hub's state-dict sharding (what
``save_pretrained`` and the Hub write) and gguf-py's split writer (llama.cpp's gguf-split layout) —
resolve to one set whichever way they are named, every tensor's bytes, read through our index from
the file it names, are the bytes the writer was given, and they load verified through the
strategies and the runner. Also the Hub cache's layout (snapshots/<rev>/file → ../../blobs/<sha>).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from foreign_writers import read_via_index, split_names, write_gguf_split, write_hub_checkpoint
from workbench.formats import open_index
from workbench.measure.run.verify import verify_placements
from workbench.strategies import STRATEGIES, get_strategy, strategy_kind
from workbench.upload import open_device

ST_INDEX = "model.safetensors.index.json"
# Every built-in strategy (both odirect modes); the peers below.
SET_STRATEGIES = [("pread", {}), ("willneed", {}), ("warmer", {}), ("mmap", {}), ("populate", {}), ("lanes", {}),
                  ("experts", {}), ("odirect", {}), ("odirect", {"mode": "inplace"}), ("ring", {})]


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    pytest.importorskip("torch")  # the state dict the writer is given is torch's
    pytest.importorskip("huggingface_hub")
    directory = tmp_path_factory.mktemp("hub") / "ckpt"
    return directory, write_hub_checkpoint(directory, seed=7)


@pytest.fixture(scope="module", params=[False, True], ids=["splits", "no-tensor-first-split"])
def gguf_set(request, tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_gguf_split(path, seed=3, split_max_tensors=4, small_first_shard=request.param)


def same_set(a, b) -> None:
    assert [f.path for f in a.files] == [f.path for f in b.files]
    assert {(t.name, t.file, t.offset, t.nbytes) for t in a} == {(t.name, t.file, t.offset, t.nbytes) for t in b}
    assert a.path == b.path and a.index_file == b.index_file


def test_a_hub_checkpoint_is_one_set_however_it_is_named(hub):
    directory, given = hub
    shards = sorted(directory.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 4, "the writer should have sharded the state dict"
    whole = open_index(directory)
    assert whole.sharded and whole.index_file == str(directory / ST_INDEX) and whole.path == whole.index_file
    assert [f.path for f in whole.files] == [str(s) for s in shards]
    for other in [directory / ST_INDEX, *shards]:
        same_set(whole, open_index(other))
    assert read_via_index(whole) == given
    stated = json.loads((directory / ST_INDEX).read_text())["metadata"]["total_size"]
    assert stated == whole.nbytes == sum(map(len, given.values()))
    assert {t.dtype for t in whole} >= {"BF16", "F16", "F32", "I8", "I64", "U8", "F64", "BOOL"}
    assert whole.size == sum(s.stat().st_size for s in shards)


def test_a_gguf_py_split_set_is_one_set_however_it_is_named(gguf_set):
    path, given = gguf_set
    splits = split_names(path)
    assert len(splits) >= 3 and splits[0].name == "tiny-00001-of-%05d.gguf" % len(splits)
    whole = open_index(path.parent)
    assert whole.format == "gguf" and [f.path for f in whole.files] == [str(s) for s in splits]
    for split in splits:
        same_set(whole, open_index(split))
    assert read_via_index(whole) == given
    assert sum(f.n_tensors for f in whole.files) == len(given)
    meta = dict(whole.metadata)
    assert meta["split.no"] == "0" and meta["split.count"] == str(len(splits))


def hub_cache(root: Path, checkpoint: Path, sub: str = "") -> Path:
    """The checkpoint laid out as the Hub cache does: blobs named by hash, snapshot entries linking to
    them relatively (``../../blobs/<sha>``, one ``..`` more per subfolder)."""
    repo = root / "models--org--tiny"
    snapshot = repo / "snapshots" / ("0" * 40) / sub
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    up = "../" * (2 + bool(sub))
    for i, f in enumerate(sorted(checkpoint.iterdir())):
        blob = repo / "blobs" / f"{i:064x}"
        shutil.copyfile(f, blob)
        (snapshot / f.name).symlink_to(f"{up}blobs/{blob.name}")
    return snapshot


@pytest.mark.parametrize("sub", ["", "transformer"])
def test_the_hub_cache_layout_loads(hub, tmp_path, sub):
    directory, given = hub
    snapshot = hub_cache(tmp_path, directory, sub)
    assert all(os.path.islink(p) for p in snapshot.iterdir())
    whole = open_index(snapshot)
    assert whole.index_file == str(snapshot / ST_INDEX)
    for other in [snapshot / ST_INDEX, *sorted(snapshot.glob("model-*.safetensors"))]:
        same_set(whole, open_index(other))
    assert read_via_index(whole) == given
    with open_device("host") as device:
        result = get_strategy("pread")().load(whole, device)
        assert verify_placements(whole, device, result.placements).ok


def load_verified(name: str, index, params: dict | None = None) -> None:
    strategy = get_strategy(name).from_strings(params or {})
    fits = strategy.fits(index, "host")
    if not strategy.available() or not fits:
        pytest.skip(f"{name}: {strategy.available().reason or fits.reason}")
    with open_device("host") as device:
        result = strategy.load(index, device)
        report = verify_placements(index, device, result.placements)
    assert report.ok and report.checked == report.total == len(index), report.detail
    assert result.bytes_moved == index.nbytes


@pytest.mark.parametrize("name, params", SET_STRATEGIES, ids=str)
def test_every_strategy_loads_the_hub_checkpoint_verified(name, params, hub):
    load_verified(name, open_index(hub[0]), params)


@pytest.mark.parametrize("name, params", SET_STRATEGIES, ids=str)
def test_every_strategy_loads_the_gguf_py_split_set_verified(name, params, gguf_set):
    load_verified(name, open_index(gguf_set[0].parent), params)


@pytest.mark.parametrize("name", [n for n in STRATEGIES if strategy_kind(n) == "peer"])
def test_the_peers_load_the_hub_checkpoint_verified(name, hub):
    load_verified(name, open_index(hub[0]))


def test_both_sets_load_verified_through_the_runner(hub, gguf_set, tmp_path, isolated_cache):
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure

    models = [str(hub[0] / ST_INDEX), str(split_names(gguf_set[0])[-1])]  # an index file, a last split
    configs = [RunConfig(m, s) for m in models for s in ("pread", "lanes", "ring")]
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        results = measure(configs, runs=1, cache="asis", ledger=ledger, lock_dir=tmp_path / "locks")
    assert all(r.verdict != "failed" for r in results), [r.notes for r in results]
    assert all(run.verified for r in results for run in r.runs)
