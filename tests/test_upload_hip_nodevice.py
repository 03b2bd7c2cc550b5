"""The hip backend as far as hip-python goes with no AMD GPU and no ROCm runtime (every machine here)."""
from __future__ import annotations

import ctypes.util
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from workbench.errors import BackendUnavailable, DeviceError
from workbench.registry import Availability
from workbench.upload import device_availability, open_device
from workbench.upload._gpu import call_runtime, probe_runtime
from workbench.upload.hip import HIP_RUNTIME, HipDevice, format_hip_version, gfx_arch, is_uma_arch

try:
    from hip import hip
except ImportError:  # the base install includes hip-python on Linux x86_64; elsewhere it is an extra
    pytest.skip("hip-python not installed: pip install 'workbench[hip]'", allow_module_level=True)
NO_ROCM = ctypes.util.find_library("amdhip64") is None
needs_no_rocm = pytest.mark.skipif(not NO_ROCM, reason="a ROCm runtime is installed here")


@needs_no_rocm
def test_available_says_the_rocm_runtime_is_missing() -> None:
    expected = Availability(False, "no driver: libamdhip64.so not found (ROCm runtime missing)")
    assert HipDevice.available() == expected
    assert device_availability("hip") == expected


@needs_no_rocm
def test_open_device_raises_backend_unavailable_with_the_reason_and_hint() -> None:
    with pytest.raises(BackendUnavailable) as err:
        open_device("hip:0")
    assert err.value.name == "hip" and err.value.reason.startswith("no driver: libamdhip64.so")
    assert "pip install 'workbench[hip]'" in str(err.value)


def test_module_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hip", None)  # makes `from hip import hip` raise ImportError
    assert HipDevice.available() == Availability(False, "module missing: hip Python bindings not importable")


def _stub(**functions: Any) -> SimpleNamespace:
    """A module carrying the real hip-python enums and the given functions (no runtime needed)."""
    return SimpleNamespace(hipError_t=hip.hipError_t, hipMemcpyKind=hip.hipMemcpyKind, **functions)


def test_no_device_from_the_real_error_enum() -> None:
    stub = _stub(hipGetDeviceCount=lambda: (hip.hipError_t.hipErrorNoDevice, 0))
    expected = Availability(False, "no device: hipGetDeviceCount returned 0")
    assert probe_runtime(HIP_RUNTIME, lambda: stub) == expected


def test_error_translation_with_real_codes_even_when_the_runtime_cannot_describe_them() -> None:
    def no_runtime(*_: Any) -> Any:
        raise RuntimeError("failed to dlopen 'libamdhip64.so'")
    stub = _stub(hipMalloc=lambda n: (hip.hipError_t.hipErrorOutOfMemory, None), hipGetErrorString=no_runtime)
    with pytest.raises(DeviceError) as err:
        call_runtime(stub, HIP_RUNTIME, "hip:0", "malloc", 1 << 40)
    assert str(err.value) == "hip:0: hipMalloc failed: hipErrorOutOfMemory"
    described = _stub(hipFree=lambda p: (hip.hipError_t.hipErrorInvalidValue,),
                      hipGetErrorString=lambda e: (hip.hipError_t.hipSuccess, b"invalid argument"))
    with pytest.raises(DeviceError, match=r"hipFree failed: hipErrorInvalidValue \(invalid argument\)"):
        call_runtime(described, HIP_RUNTIME, "hip:0", "free", 0)


def test_the_real_binding_has_every_name_we_call() -> None:
    for name in list(HIP_RUNTIME.calls.values()) + [HIP_RUNTIME.pinned_flags, HIP_RUNTIME.register_flags]:
        assert callable(getattr(hip, name)) or isinstance(getattr(hip, name), int), name
    for code in ("hipSuccess", *HIP_RUNTIME.no_device_codes, *HIP_RUNTIME.no_driver_codes):
        assert hasattr(hip.hipError_t, code), code
    for kind in ("hipMemcpyHostToDevice", "hipMemcpyDeviceToHost"):
        assert hasattr(hip.hipMemcpyKind, kind), kind
    props = hip.hipDeviceProp_t()  # the fields describe_arch and info() read
    for field in ("name", "gcnArchName", "integrated", "totalGlobalMem"):
        assert hasattr(props, field), field


@pytest.mark.parametrize("name,uma", [
    ("gfx1103", True), ("gfx1150", True), ("gfx1151", True), ("gfx1152", True),
    ("gfx1151:xnack-", True), (" GFX1150 ", True), ("gfx1100", False), ("gfx1101", False),
    ("gfx90a:sramecc+:xnack-", False), ("gfx942", False), ("gfx11510", False), ("", False),
])
def test_is_uma_arch(name: str, uma: bool) -> None:
    assert is_uma_arch(name) is uma


def test_gfx_arch_strips_feature_flags_and_padding() -> None:
    assert gfx_arch(b"gfx1151:xnack-\0\0\0") == "gfx1151"
    assert gfx_arch("gfx942:sramecc+:xnack-") == "gfx942"


def test_format_hip_version() -> None:
    assert format_hip_version(60241134) == "6.2.41134"
    assert format_hip_version(70051831) == "7.0.51831"


def test_importing_the_backends_imports_no_binding() -> None:
    code = ("import sys, workbench, workbench.upload, workbench.upload.hip, workbench.upload.cuda; "
            "print(sorted(m for m in ('hip', 'cuda', 'rocm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
