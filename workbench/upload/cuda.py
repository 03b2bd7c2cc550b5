"""The ``cuda`` backend: NVIDIA GPUs through cuda-python's runtime bindings.

All the logic lives in :mod:`workbench.upload._gpu`; this module names the cudart functions, imports the
binding (``cuda.bindings.runtime``, or ``cuda.cudart`` from cuda-python < 12.6) and reads arch/UMA.
"""
from __future__ import annotations

from typing import Any

from workbench.upload._gpu import GpuDevice, GpuRuntime, call_names

CUDA_RUNTIME = GpuRuntime(
    backend="cuda",
    prefix="cuda",
    calls=call_names("cuda", host_alloc="cudaHostAlloc", host_free="cudaFreeHost"),
    pinned_flags="cudaHostAllocDefault",
    write_combined_flags="cudaHostAllocWriteCombined",
    register_flags="cudaHostRegisterDefault",
    register_readonly_flags="cudaHostRegisterReadOnly",
    no_device_codes=("cudaErrorNoDevice",),
    no_driver_codes=("cudaErrorInsufficientDriver",),
    driver_lib="libcuda.so",
    driver_name="NVIDIA driver",
    distributions=("cuda-bindings", "cuda-python"),
)


def load_cudart() -> Any:
    """The cudart binding module; ImportError when cuda-python is not installed."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime  # cuda-python before the cuda.bindings split
    return runtime


def format_cuda_version(version: int) -> str:
    """12080 → "12.8" (CUDA encodes 1000 * major + 10 * minor)."""
    return f"{version // 1000}.{version % 1000 // 10}"


class CudaDevice(GpuDevice):
    """An NVIDIA GPU; ``uma`` from the ``integrated`` property (Jetson, GB10-class parts)."""

    name = "cuda"
    runtime = CUDA_RUNTIME
    load_module = staticmethod(load_cudart)
    format_version = staticmethod(format_cuda_version)

    @classmethod
    def describe_arch(cls, props: Any) -> tuple[str, bool]:
        return f"sm_{props.major}{props.minor}", bool(props.integrated)
