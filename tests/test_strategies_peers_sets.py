"""The reference strategies on a sharded checkpoint: each library is handed the set the way its own
documentation loads several files (safetensors: one ``safe_open`` per shard; fastsafetensors: one
``add_filenames`` with every file; Run:ai: one ``stream_files``; InstantTensor: one ``safe_open`` over
the list), every tensor verified byte-exact against its own shard, and a set no peer can read (a
gguf-split set) refused in one line.
"""
from __future__ import annotations

import sys

import pytest

from test_strategies_peers import HOST_VARIANTS, build, load_verified
from test_strategies_peers_gpu import gpu, run_on_gpu, stand_in_instanttensor  # noqa: F401 - gpu is a fixture
from workbench.errors import WorkbenchError
from workbench.formats.index import ModelFile, TensorIndex, TensorInfo
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.strategies.peers import safetensors_peer
from workbench.strategies.peers.common import adopt_tensor
from workbench.upload import open_device

PEERS = ("peer-safetensors", "peer-fastsafetensors", "peer-runai", "peer-instanttensor")


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def variant_id(v):
    return " ".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else v


@pytest.mark.parametrize("layout", ["dense", "moe"])
@pytest.mark.parametrize("name, params", HOST_VARIANTS, ids=variant_id)
def test_every_cpu_capable_variant_verifies_a_sharded_checkpoint(name, params, layout, sharded_model):
    index, strategy = sharded_model("safetensors", layout, shards=3), build(name, params)
    assert index.sharded and len(index.files) == 3
    with open_device("host") as device:
        result = load_verified(strategy, index, device)
    fact = result.engaged_by("peer")
    assert fact.state == "ON" and fact.done == fact.total == len(index)
    assert fact.note.endswith("(3 files)")
    assert {p.tensor for p in result.placements} == {t.name for t in index}


@pytest.mark.parametrize("name", PEERS)
def test_a_gguf_split_set_is_refused_in_one_line(name, sharded_model):
    index = sharded_model("gguf", "dense", shards=3)
    reason = get_strategy(name)().fits(index, "cuda").reason
    assert reason == "reads safetensors files only, this model is a gguf set of 3 files"


def spy(monkeypatch, owner, attr, calls):
    real = getattr(owner, attr)

    def record(self, *args, **kwargs):
        calls.append((args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, attr, record)


def test_fastsafetensors_registers_every_shard_with_one_rank_and_copies_once(monkeypatch, sharded_model):
    fst = pytest.importorskip("fastsafetensors")
    index, strategy = sharded_model("safetensors", "dense", shards=3), build("peer-fastsafetensors", {})
    added, copied = [], []
    spy(monkeypatch, fst.SafeTensorsFileLoader, "add_filenames", added)
    spy(monkeypatch, fst.SafeTensorsFileLoader, "copy_files_to_device", copied)
    with open_device("host") as device:
        load_verified(strategy, index, device)
    assert added == [(({0: [f.path for f in index.files]},), {})] and len(copied) == 1


def test_runai_streams_every_shard_in_one_request(monkeypatch, sharded_model):
    pytest.importorskip("runai_model_streamer")
    from runai_model_streamer import SafetensorsStreamer

    index, strategy = sharded_model("safetensors", "moe", shards=3), build("peer-runai", {})
    calls = []
    spy(monkeypatch, SafetensorsStreamer, "stream_files", calls)
    with open_device("host") as device:
        load_verified(strategy, index, device)
    assert [args for args, _ in calls] == [([f.path for f in index.files],)]


def test_safetensors_opens_each_shard_once_in_order(monkeypatch, sharded_model):
    safetensors = pytest.importorskip("safetensors")
    index, strategy = sharded_model("safetensors", "dense", shards=3), build("peer-safetensors", {"framework": "numpy"})
    opened = []
    real = safetensors.safe_open

    def record(path, *args, **kwargs):
        opened.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(safetensors, "safe_open", record)
    with open_device("host") as device:
        load_verified(strategy, index, device)
    assert opened == [f.path for f in index.files]


def test_instanttensor_gets_the_list_of_shards_in_one_safe_open(monkeypatch, gpu, sharded_model):
    device, fake = gpu
    calls = []
    module = stand_in_instanttensor(calls)
    one_file = stand_in_instanttensor([]).safe_open  # the stand-in reads one file; the library takes a list

    class ListOpen(one_file):
        def __init__(self, filename, framework, device, process_group=None, *, backend=None):
            calls.append({"filename": filename, "framework": framework, "device": device, "backend": backend})
            self.parts = [one_file(f, framework, device, backend=backend) for f in filename]
            self.backend, self.io_depth = self.parts[0].backend, self.parts[0].io_depth

        def __exit__(self, *exc):
            for part in self.parts:
                part.__exit__(*exc)

        def tensors(self):
            for part in self.parts:
                yield from part.tensors()

    module.safe_open = ListOpen
    monkeypatch.setitem(sys.modules, "instanttensor", module)
    index = sharded_model("safetensors", "dense", shards=3)
    result = run_on_gpu("peer-instanttensor", {}, index, device, fake)
    assert calls == [{"filename": [f.path for f in index.files], "framework": "pt", "device": 0, "backend": None}]
    assert all(p.buffer.adopted for p in result.placements)
    assert result.engaged_by("peer").note.endswith("(3 files)")


def test_instanttensor_wants_back_to_back_tensors_within_each_shard_not_across_them():
    def model(gap_in_second: int) -> TensorIndex:
        files, tensors = [], []
        for i in range(2):
            path = f"/m/model-0000{i + 1}-of-00002.safetensors"
            sizes = (64, 32)
            files.append(ModelFile(path, "safetensors", 200, 100, 8, 2, 100, 196 + gap_in_second * i))
            tensors += [TensorInfo(f"t{i}.a", 100, 64, "F16", (32,), path),
                        TensorInfo(f"t{i}.b", 164 + gap_in_second * i, sizes[1], "F16", (16,), path)]
        return TensorIndex("/m/model.safetensors.index.json", "safetensors", 400, 100, 8, tuple(tensors),
                           files=tuple(files))

    strategy = get_strategy("peer-instanttensor")()
    monkey_codes = frozenset({"F16"})
    strategy.readable_codes = lambda: monkey_codes  # the dtype table is not what this is about
    assert strategy.fits_file(model(0), "cuda")  # each file starts its tensors at its own offset 100
    assert strategy.fits_file(model(8), "cuda").reason == \
        "instanttensor needs back-to-back tensors; a gap follows t1.a in model-00002-of-00002.safetensors"


def test_lazily_mapped_tensors_of_any_shard_are_never_adopted(sharded_model, monkeypatch):
    pytest.importorskip("torch")
    strategy = build("peer-safetensors", {"framework": "pt", "io": "mmap"})
    monkeypatch.setattr(safetensors_peer, "copy_tensor", adopt_tensor)
    with open_device("host") as device, pytest.raises(WorkbenchError, match="view of the file mapping"):
        strategy.load(sharded_model("safetensors", "dense", shards=3), device)


@pytest.mark.parametrize("name, params", [("peer-fastsafetensors", {}), ("peer-runai", {}),
                                          ("peer-safetensors", {"framework": "numpy"})])
def test_a_wrong_byte_in_the_last_shard_fails_verification(name, params, sharded_model):
    index, strategy = sharded_model("safetensors", "dense", shards=3), build(name, params)
    last = {t.name for t in index.tensors_in(index.files[-1].path)}
    with open_device("host") as device:
        result = load_verified(strategy, index, device)
        victim = max((p for p in result.placements if p.tensor in last), key=lambda p: p.nbytes)
        victim.buffer.handle[victim.nbytes // 2] ^= 0xFF
        report = verify_placements(index, device, result.placements)
    assert not report.ok and report.first_mismatch == victim.tensor


@pytest.mark.parametrize("name, params", [("peer-safetensors", {"framework": "pt"}), ("peer-fastsafetensors", {}),
                                          ("peer-runai", {}), ("peer-safetensors", {"framework": "numpy"})])
def test_on_a_gpu_backend_every_shards_tensors_are_placed_and_verified(name, params, gpu, sharded_model):
    device, fake = gpu
    index = sharded_model("safetensors", "moe", shards=3)
    result = run_on_gpu(name, params, index, device, fake)
    adopted = params.get("framework") != "numpy"  # numpy results have no way onto a GPU: our copy
    assert all(p.buffer.adopted == adopted for p in result.placements)
    assert result.bytes_moved == index.nbytes
