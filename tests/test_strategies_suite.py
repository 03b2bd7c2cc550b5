"""One suite for every registered strategy: a strategy added to the registry is tested here for free.

Every load is verified byte-exact by reading back what landed on the device.
"""
from __future__ import annotations

import json
import math
import os

import pytest

import safetensors_files
from workbench.errors import CacheStateError
from workbench.io.pagecache import prepare
from workbench.strategies import STRATEGIES, get_strategy, strategy_kind
from workbench.strategies.base import PHASES, LoadResult
from workbench.upload import open_device
from workbench.measure.run.verify import verify_placements

NAMES = STRATEGIES.names()
# The backend the suite loads onto: host everywhere; WORKBENCH_TEST_DEVICE=cuda runs the same suite
# on a GPU (the same byte-for-byte read-back), which is how the cuda backend is checked on the H200.
DEVICE = os.environ.get("WORKBENCH_TEST_DEVICE", "host")


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def set_cache(path: str, state: str) -> None:
    try:
        prepare(path, state)
    except CacheStateError as exc:
        pytest.skip(f"cache state unreachable here: {exc}")


def set_cache_all(index, state: str) -> None:
    """The cache state for every file of the model."""
    for f in index.files:
        set_cache(f.path, state)


def load_and_verify(name, index, device_name=DEVICE, **params) -> LoadResult:
    strategy = get_strategy(name)(**params)
    avail = strategy.available()
    if not avail:  # a peer whose library is not installed here: one line saying so
        pytest.skip(f"{name}: {avail.reason}")
    fits = strategy.fits(index, device_name.partition(":")[0])
    if not fits:  # a peer reads one format, some dtypes, or loads to GPUs only; it says so
        pytest.skip(f"{name}: {fits.reason}")
    device = open_device(device_name)
    try:
        result = strategy.load(index, device)
        report = verify_placements(index, device, result.placements)
        assert report.ok, f"{name}: {report.first_mismatch}: {report.detail}"
        assert report.checked == report.total == len(index)
        check_result(result, index, name)
        return result
    finally:
        device.close()  # frees every buffer: on a GPU the suite would otherwise pile up allocations


def check_result(result: LoadResult, index, name: str) -> None:
    assert result.strategy == name
    assert result.bytes_moved == index.nbytes
    assert result.n_tensors == len(index)
    assert sorted(p.tensor for p in result.placements) == sorted(t.name for t in index)
    for p in result.placements:
        assert p.nbytes == index.tensor(p.tensor).nbytes
    assert result.load_s > 0
    assert set(PHASES) <= set(result.phases)
    assert all(v >= 0 for v in result.phases.values())
    assert sum(result.phases.values()) <= result.load_s * 1.01 + 1e-3  # phases nest inside the window
    assert result.minflt >= 0 and result.majflt >= 0
    assert result.engaged, "every strategy states what engaged"
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["bytes"] == index.nbytes and doc["strategy"] == name
    assert not any(math.isnan(v) for v in doc["phases"].values())


@pytest.mark.parametrize("cache", ["cold", "warm"])
@pytest.mark.parametrize("layout", ["dense", "moe"])
@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_loads_byte_exact(name, fmt, layout, cache, synth_model):
    index = synth_model(fmt, layout)
    set_cache(index.path, cache)
    result = load_and_verify(name, index)
    assert result.evict is False and result.evict_source == "device-discrete"


@pytest.mark.parametrize("cache", ["cold", "warm"])
@pytest.mark.parametrize("layout", ["dense", "moe"])
@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_loads_a_sharded_model_byte_exact(name, fmt, layout, cache, sharded_model):
    # A gguf-split set or safetensors shards with their index: every tensor checked against its own
    # file; a peer that cannot load a set yet says so in one line (its fits) and is skipped.
    index = sharded_model(fmt, layout, shards=3, size=2 << 20)
    assert index.sharded and len({t.file for t in index}) == 3
    set_cache_all(index, cache)
    result = load_and_verify(name, index, **get_strategy(name).Params.small_pieces)
    if strategy_kind(name) == "strategy":  # the engaged facts speak of the whole set
        assert any("over 3 files" in e.note for e in result.engaged), result.engaged


@pytest.mark.parametrize("cache", ["cold", "warm"])
@pytest.mark.parametrize("layout", ["dense", "moe"])
@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
@pytest.mark.parametrize("staging", ["auto", "alloc"])
@pytest.mark.parametrize("provision, mapping", [("background", "each"), ("first-read", "each"), ("first-read", "one")])
def test_ring_with_background_or_first_read_provisioning_loads_byte_exact(provision, mapping, staging, fmt, layout,
                                                                          cache, synth_model):
    index = synth_model(fmt, layout)
    set_cache(index.path, cache)
    result = load_and_verify("ring", index, provision=provision, mapping=mapping, staging=staging,
                             direct="off")  # staged on host too
    note = result.engaged_by("pinned_staging").note
    assert ("in the background" if provision == "background" else
            "faulted in by its first read" if staging == "auto" else "made by the reader that first took it") in note
    assert ("from one mapping made with the ring" in note) == (mapping == "one" and staging == "auto")


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_under_uma_policy(name, fmt, synth_model):
    index = synth_model(fmt, "moe")
    set_cache(index.path, "warm")
    result = load_and_verify(name, index, "host-uma")
    assert result.evict is True and result.evict_source == "device-uma"


@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_page_aligned_gguf(name, synth_model):
    index = synth_model("gguf", "moe", alignment=4096)
    assert index.page_aligned == len(index)
    set_cache(index.path, "cold")
    load_and_verify(name, index)


@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_odd_layout(name, raw_model):
    # A few-byte tensor, odd offsets, strides that are no page multiple, one tensor spanning pieces.
    sizes = [3, 1, 4097, 12289, 5, (2 << 20) + 333, 4096, 77, 0, 65537]
    index = raw_model(sizes, first=1231, gap=29, tail=17)
    set_cache(index.path, "cold")
    load_and_verify(name, index, **get_strategy(name).Params.small_pieces)  # tensors across pieces


@pytest.mark.parametrize("kind", sorted(safetensors_files.KINDS))
@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_bf16_and_mixed_dtypes(name, kind, dtype_model):
    # bf16 is what real checkpoints ship; mixed files put most tensors at odd offsets.
    index = dtype_model(kind)
    assert any(t.offset % 2 for t in index) or kind == "bf16"
    set_cache(index.path, "warm")
    load_and_verify(name, index)


@pytest.mark.parametrize("upload", ["pageable", "pinned", "registered"])
def test_pread_upload_modes_byte_exact(upload, raw_model):
    index = raw_model([3, 4097, (1 << 20) + 333, 65537], first=1231, gap=29, tail=17)
    set_cache(index.path, "cold")
    load_and_verify("pread", index, upload=upload, staging_mib=1)


@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_empty_index(name, raw_model):
    index = raw_model([], first=64, tail=100)
    result = load_and_verify(name, index)
    assert result.bytes_moved == 0


@pytest.mark.parametrize("name", NAMES)
def test_every_strategy_declares_params_and_availability(name):
    cls = get_strategy(name)
    assert cls.name == name and cls.summary
    defaults = cls.param_defaults()
    assert "evict" in defaults and defaults["evict"] is None
    avail = cls.available()
    if cls.kind == "peer":  # present when installed; otherwise one line that says how to install it
        assert avail.ok or ("pip install" in avail.reason and "\n" not in avail.reason), avail.reason
    else:
        assert avail.ok, avail.reason
    assert cls.kind == strategy_kind(name)  # the registry entry and the class agree
    with pytest.raises(Exception) as info:
        cls.from_strings({"no_such_param": "1"})
    assert "no_such_param" in str(info.value)


@pytest.mark.parametrize("name, params, want", [
    ("pread", {}, {"readers": 1, "copy_from": "pageable", "direct": False}),
    ("pread", {"upload": "pinned", "staging_mib": 1}, {"readers": 1, "copy_from": "pinned"}),
    ("mmap", {}, {"readers": 0, "copy_from": "mmap"}),
    ("mmap", {"evict": True}, {"readers": 1, "copy_from": "pageable"}),  # fell back to pread
    ("lanes", {"threads": 3, "chunk_mib": 1}, {"readers": 3}),
    ("odirect", {"threads": 2, "bounce_mib": 1}, {"readers": 2, "direct": True}),
])
def test_load_path_facts_pick_the_right_wall(name, params, want, synth_model):
    # The runner bounds each attempt by these facts; a wrong one would misreport "% of ceiling".
    index = synth_model("gguf", "dense")
    set_cache(index.path, "cold")
    path = load_and_verify(name, index, **params).path
    assert {k: path[k] for k in want} == want


def test_peer_refuses_a_format_it_cannot_read_in_one_line(synth_model, tmp_path):
    from workbench.errors import StrategyUnavailable
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure

    index = synth_model("gguf", "dense")
    with pytest.raises(StrategyUnavailable, match="reads safetensors files only, this one is gguf"):
        get_strategy("peer-safetensors")().load(index, open_device("host"))
    ledger = Ledger(tmp_path / "l.sqlite")
    with pytest.raises(StrategyUnavailable, match=index.path):  # preflight: before anything is recorded
        measure([RunConfig(index.path, "peer-safetensors")], runs=1, ledger=ledger,
                lock_dir=tmp_path / "locks")
    assert ledger.attempts().empty


@pytest.mark.timeout(60)
@pytest.mark.parametrize("upload", ["pageable", "pinned"])
def test_lanes_many_threads_small_pieces_never_deadlock(upload, raw_model):
    # More lanes than pieces in flight, 1 MiB pieces: the in-order consumer must never wait on a
    # piece whose lane is starved of staging (a lane takes its staging before its job).
    index = raw_model([3, (3 << 20) + 333, 1, (2 << 20) + 77, 4097, 65537], first=1231, gap=29, tail=17)
    for _ in range(5):
        set_cache(index.path, "cold")
        result = load_and_verify("lanes", index, threads=8, chunk_mib=1, upload=upload)
    assert result.path["copy_from"] == upload and result.path["readers"] == 8
    if upload == "pinned":  # 2 x 8 slots asked, sized to the 5.2 MiB read: 6 — fewer slots than lanes
        assert result.engaged_by("pinned_staging").total == 6


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_mmap_register_pins_the_mapping_and_lands_exact_bytes(cache, synth_model):
    index = synth_model("safetensors", "moe")
    set_cache(index.path, cache)
    result = load_and_verify("mmap", index, register=True)
    fact = result.engaged_by("registered_mapping")
    assert fact is not None and fact.total == 1
    # host: register_host is mlock; a refusal (RLIMIT_MEMLOCK) must read INERT and fall back
    assert result.path["copy_from"] == ("registered" if fact.done else "mmap")
    assert result.engaged_by("zero_copy").state == "ON"


def test_mmap_register_refused_reads_inert_and_falls_back(synth_model, monkeypatch):
    from workbench.upload.host import HostDevice

    monkeypatch.setattr(HostDevice, "register_host", lambda self, view: None)  # as under RLIMIT_MEMLOCK
    index = synth_model("gguf", "dense")
    result = load_and_verify("mmap", index, device_name="host", register=True)
    assert result.engaged_by("registered_mapping").state == "INERT"
    assert result.path["copy_from"] == "mmap"
