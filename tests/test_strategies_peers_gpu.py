"""The GPU side of the reference strategies, without a GPU: the shared GPU backend over the fake CUDA
runtime, with the peers' torch tensors standing in for device memory (torch here is a CPU build, so the
peers are pointed at "cpu" where they would say "cuda:0"). What this proves: on a GPU backend every
peer's tensors are adopted as placements (no copy of ours, except numpy results, which have no way
there), verification reads them back byte-exact through the runtime, and neither a free nor the
device's close calls the runtime's free on memory the framework owns. InstantTensor, CUDA-only, runs
against a stand-in module whose call shape is checked against the installed library.
"""
from __future__ import annotations

import inspect
import os
import sys
import types

import pytest

from test_upload_devices import FakeRuntime
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.strategies.peers import common, fastsafetensors_peer, runai_peer, safetensors_peer
from workbench.upload.cuda import CudaDevice

torch = pytest.importorskip("torch")


class ForeignMemoryFake(FakeRuntime):
    """The fake runtime, plus memory "a framework" allocated: adopted ranges count as device memory."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.foreign: list[tuple[int, int]] = []

    def _on_device(self, addr: int, size: int) -> bool:
        if any(lo <= addr and addr + size <= hi for lo, hi in self.foreign):
            return True
        return super()._on_device(addr, size)


@pytest.fixture
def gpu(monkeypatch):
    """A fake-CUDA device whose adopt() registers the adopted range with the fake, and peers that
    address torch's CPU device where they would address cuda:0."""
    fake = ForeignMemoryFake("cuda")
    device = CudaDevice(0, module=fake)
    adopt = device.adopt

    def adopt_and_register(ptr, nbytes, owner):
        fake.foreign.append((ptr, ptr + max(nbytes, 1)))
        return adopt(ptr, nbytes, owner)

    monkeypatch.setattr(device, "adopt", adopt_and_register)
    for module in (safetensors_peer, fastsafetensors_peer, runai_peer):
        monkeypatch.setattr(module, "torch_device", lambda d: "cpu")
    monkeypatch.setattr(runai_peer, "torch_device", lambda d: "cpu:0")  # takes the README's .to() branch
    yield device, fake
    device.close()


def run_on_gpu(name, params, index, device, fake):
    strategy = get_strategy(name).from_strings(params)
    if not strategy.available():
        pytest.skip(f"{name}: {strategy.available().reason}")
    assert strategy.fits(index, "cuda")
    result = strategy.load(index, device)
    report = verify_placements(index, device, result.placements)
    assert report.ok and report.checked == len(index), report.detail
    return result


@pytest.mark.parametrize("name, params, adopted", [
    ("peer-safetensors", {"framework": "pt"}, True),
    ("peer-safetensors", {"framework": "pt", "io": "pread"}, True),
    ("peer-safetensors", {"framework": "numpy"}, False),  # numpy has no way onto a GPU: our copy
    ("peer-fastsafetensors", {}, True),
    ("peer-runai", {}, True),
])
def test_on_a_gpu_backend_peer_tensors_are_adopted_and_verified(name, params, adopted, gpu, dtype_model):
    device, fake = gpu
    index = dtype_model("bf16")
    result = run_on_gpu(name, params, index, device, fake)
    assert all(p.buffer.adopted == adopted for p in result.placements)
    mallocs = fake.names().count("Malloc")
    assert mallocs == (0 if adopted else sum(1 for t in index if t.nbytes))
    device.close()
    assert fake.names().count("Free") == mallocs, "only our own allocations are freed"
    assert all(p.buffer.freed and p.buffer.owner is None for p in result.placements)


def test_runai_takes_the_readme_to_device_step_on_a_gpu(gpu, dtype_model):
    device, fake = gpu
    result = run_on_gpu("peer-runai", {}, dtype_model("mixed"), device, fake)
    assert result.phases["upload"] > 0  # tensor.to(device), timed as the upload
    assert "-> cpu:0" in result.engaged_by("peer").note


def test_prepare_starts_torch_on_the_gpu_and_sets_the_library_environment(gpu, monkeypatch):
    device, _ = gpu
    started = []
    monkeypatch.setattr(common, "start_torch_on", started.append)
    monkeypatch.delenv("RUNAI_STREAMER_FS_STRATEGY", raising=False)
    strategy = get_strategy("peer-runai").from_strings({"direct": "0"})
    if not strategy.available():
        pytest.skip(strategy.available().reason)
    strategy.prepare(device)
    assert started == [device]
    assert os.environ["RUNAI_STREAMER_FS_STRATEGY"] == "io_uring_buffered,sync_buffered"
    monkeypatch.delenv("RUNAI_STREAMER_FS_STRATEGY")
    started.clear()
    get_strategy("peer-safetensors").from_strings({"framework": "numpy"}).prepare(device)
    assert started == []  # no torch for the numpy framework


# --- InstantTensor: CUDA only, so a stand-in with the real library's call shape --------------------


def test_the_installed_instanttensor_has_the_api_the_strategy_calls():
    real = pytest.importorskip("instanttensor")
    params = inspect.signature(real.safe_open.__init__).parameters
    assert {"filename", "framework", "device", "backend"} <= set(params)
    assert params["backend"].kind is inspect.Parameter.KEYWORD_ONLY
    assert {"URING", "AIO", "URING_BUFFERED", "MMAP"} <= {b.name for b in real.Backend}
    assert real.BackendPolicy.BUFFERED and callable(real.safe_open.tensors)
    source = inspect.getsource(real.safe_open.__init__)
    assert "device.type != \"cuda\"" in source  # why the host backend is refused up front


def stand_in_instanttensor(calls):
    """A module shaped like instanttensor: safe_open(...).tensors() yields (name, tensor) in file order;
    the tensors here are read by safetensors (pread: private CPU memory)."""
    from safetensors import safe_open as st_open

    module = types.ModuleType("instanttensor")
    module.Backend = types.SimpleNamespace(URING="URING", AIO="AIO")
    module.BackendPolicy = types.SimpleNamespace(BUFFERED="BUFFERED")

    class SafeOpen:
        def __init__(self, filename, framework, device, process_group=None, *, backend=None):
            calls.append({"filename": filename, "framework": framework, "device": device, "backend": backend})
            self.backend = types.SimpleNamespace(name="URING_BUFFERED" if backend == "BUFFERED" else "URING")
            self.io_depth = 12
            self._file = st_open(filename, framework="pt", device="cpu", backend="pread")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._file.__exit__(*exc)

        def tensors(self):
            for name in self._file.offset_keys():
                yield name, self._file.get_tensor(name)

    module.safe_open = SafeOpen
    return module


@pytest.mark.parametrize("direct, backend, io_direct", [(None, None, True), ("0", "BUFFERED", False),
                                                        ("1", ["URING", "AIO"], True)])
def test_instanttensor_on_a_gpu_backend(direct, backend, io_direct, gpu, dtype_model, monkeypatch):
    device, fake = gpu
    calls = []
    monkeypatch.setitem(sys.modules, "instanttensor", stand_in_instanttensor(calls))
    params = {} if direct is None else {"direct": direct}
    result = run_on_gpu("peer-instanttensor", params, dtype_model("bf16"), device, fake)
    assert calls == [{"filename": dtype_model("bf16").path, "framework": "pt", "device": 0, "backend": backend}]
    assert all(p.buffer.adopted for p in result.placements)
    assert result.path["direct"] is io_direct and result.path["readers"] == 12
    assert "io depth 12" in result.engaged_by("peer").note
