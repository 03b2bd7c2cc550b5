"""The reference strategies (kind ``peer``) beyond the shared suite: every variant byte-exact on the bf16
and mixed-dtype files on ``host``, refusals in one line, the guard against lazily mapped tensors, and a
negative control that shows adopted placements are really read back. GPU adoption on the fake runtime
and the worker/runner side are in test_strategies_peers_gpu.py and test_strategies_peers_runner.py.
"""
from __future__ import annotations

import sys

import pytest

from workbench.errors import StrategyUnavailable, WorkbenchError
from workbench.measure.run.verify import verify_placements
from workbench.strategies import STRATEGIES, get_strategy, strategy_kind
from workbench.strategies.peers import safetensors_peer
from workbench.strategies.peers.common import adopt_tensor
from workbench.upload import open_device

PEERS = [name for name in STRATEGIES if strategy_kind(name) == "peer"]
# Every CPU-capable variant: each framework and I/O backend, each O_DIRECT setting.
HOST_VARIANTS = [
    ("peer-safetensors", {"framework": "numpy"}), ("peer-safetensors", {"framework": "numpy", "io": "pread"}),
    ("peer-safetensors", {"framework": "pt"}), ("peer-safetensors", {"framework": "pt", "io": "pread"}),
    ("peer-fastsafetensors", {}), ("peer-fastsafetensors", {"direct": "0"}),
    ("peer-fastsafetensors", {"direct": "1", "max_threads": "2", "bbuf_size_kb": "64"}),
    ("peer-runai", {}),  # Run:ai's O_DIRECT choice is per process: its variants run in workers
]


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def build(name, params):
    strategy = get_strategy(name).from_strings(params)
    avail = strategy.available()
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")
    return strategy


def load_verified(strategy, index, device):
    fits = strategy.fits(index, device.info().backend)
    if not fits:
        pytest.skip(f"{strategy.name}: {fits.reason}")
    result = strategy.load(index, device)
    report = verify_placements(index, device, result.placements)
    assert report.ok, f"{strategy.name}: {report.first_mismatch}: {report.detail}"
    assert report.checked == report.total == len(index) and result.bytes_moved == index.nbytes
    return result


@pytest.mark.parametrize("kind", ["bf16", "mixed"])
@pytest.mark.parametrize("name, params", HOST_VARIANTS, ids=lambda v: " ".join(f"{k}={x}" for k, x in v.items())
                         if isinstance(v, dict) else v)
def test_every_cpu_capable_variant_verifies_byte_exact_on_host(name, params, kind, dtype_model):
    index, strategy = dtype_model(kind), build(name, params)
    with open_device("host") as device:
        result = load_verified(strategy, index, device)
    fact = result.engaged_by("peer")
    assert fact.state == "ON" and fact.done == fact.total == len(index)
    assert "tensors adopted" in fact.note or "copied onto the device by the workbench" in fact.note


def test_numpy_framework_reads_bf16_through_ml_dtypes(dtype_model):
    pytest.importorskip("ml_dtypes")
    strategy = build("peer-safetensors", {"framework": "numpy"})
    with open_device("host") as device:
        result = load_verified(strategy, dtype_model("bf16"), device)
    assert "framework=numpy" in result.engaged_by("peer").note


def test_refusals_are_one_line_and_say_why(dtype_model, monkeypatch):
    exotic = dtype_model("exotic")
    numpy_peer = get_strategy("peer-safetensors").from_strings({"framework": "numpy"})
    reason = numpy_peer.fits(exotic, "host").reason
    assert reason.startswith("framework=numpy cannot hold F4, F8_E4M3, F8_E5M2, F8_E8M0") and "\n" not in reason
    assert "F6" not in reason and "pt" in reason
    instant = get_strategy("peer-instanttensor")()
    assert instant.fits(dtype_model("bf16"), "host").reason == \
        "instanttensor loads to CUDA devices only; the host backend has none"
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # numpy without ml_dtypes: no bfloat16 name
    assert "ml_dtypes" in numpy_peer.fits(dtype_model("bf16"), "host").reason


def test_without_torch_the_torch_peers_are_unavailable_and_safetensors_falls_back_to_numpy(
        dtype_model, monkeypatch):
    pytest.importorskip("ml_dtypes")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    for name in ("peer-fastsafetensors", "peer-runai", "peer-instanttensor"):
        reason = get_strategy(name).available().reason
        assert reason.startswith("module missing: torch (") and "pip install torch first" in reason
        assert "\n" not in reason
    auto = get_strategy("peer-safetensors")()
    assert auto.framework() == "numpy"
    assert "framework=pt needs torch" in get_strategy("peer-safetensors")(framework="pt").fits(
        dtype_model("bf16"), "host").reason
    with open_device("host") as device:
        result = load_verified(auto, dtype_model("bf16"), device)
    assert "framework=numpy" in result.engaged_by("peer").note


def test_an_unavailable_peer_refuses_to_load_before_any_work(dtype_model):
    # with its modules installed it refuses for the device; without them, for the missing module
    why = "CUDA devices only" if get_strategy("peer-instanttensor").available() else "module missing"
    with open_device("host") as device, pytest.raises(StrategyUnavailable, match=why):
        get_strategy("peer-instanttensor")().load(dtype_model("bf16"), device)


def test_lazily_mapped_tensors_are_never_adopted_on_host(dtype_model, monkeypatch):
    # safetensors' pt + mmap tensors on CPU are views of the file mapping: adopting them would put no
    # read inside the window. The strategy copies them; a version that adopted them must fail loudly.
    pytest.importorskip("torch")
    strategy = build("peer-safetensors", {"framework": "pt", "io": "mmap"})
    monkeypatch.setattr(safetensors_peer, "copy_tensor", adopt_tensor)
    with open_device("host") as device, pytest.raises(WorkbenchError, match="view of the file mapping"):
        strategy.load(dtype_model("bf16"), device)


@pytest.mark.parametrize("name, params", [("peer-fastsafetensors", {}), ("peer-runai", {}),
                                          ("peer-safetensors", {"framework": "numpy"})])
def test_a_wrong_byte_in_an_adopted_placement_fails_verification(name, params, dtype_model):
    index, strategy = dtype_model("mixed"), build(name, params)
    with open_device("host") as device:
        result = load_verified(strategy, index, device)
        victim = max(result.placements, key=lambda p: p.nbytes)
        assert victim.buffer.adopted  # the library's own memory, not a copy of ours
        victim.buffer.handle[victim.nbytes // 2] ^= 0xFF
        report = verify_placements(index, device, result.placements)
    assert not report.ok and report.first_mismatch == victim.tensor


def test_every_peer_is_registered_as_a_peer_with_an_install_hint():
    assert set(PEERS) == {"peer-safetensors", "peer-fastsafetensors", "peer-runai", "peer-instanttensor"}
    for name in PEERS:
        entry = STRATEGIES.entries[name]
        assert entry.kind == "peer" and "pip install" in entry.hint
        assert get_strategy(name).kind == "peer"
    assert strategy_kind("pread") == "strategy" and get_strategy("pread").kind == "strategy"
