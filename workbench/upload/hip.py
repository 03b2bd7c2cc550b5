"""The ``hip`` backend: AMD GPUs through hip-python, which mirrors cuda-python's call shapes.

All the logic lives in :mod:`workbench.upload._gpu`; this module names the HIP functions, imports the
binding and reads arch/UMA. UMA is the ``integrated`` property or an APU architecture (the first
write-up's ``arch_is_uma``: gfx1103, gfx1150, gfx1151 Strix Halo, gfx1152).
"""
from __future__ import annotations

from typing import Any

from workbench.upload._gpu import GpuDevice, GpuRuntime, call_names

HIP_RUNTIME = GpuRuntime(
    backend="hip",
    prefix="hip",
    calls=call_names("hip", host_alloc="hipHostMalloc", host_free="hipHostFree"),
    pinned_flags="hipHostMallocDefault",
    write_combined_flags="hipHostMallocWriteCombined",
    register_flags="hipHostRegisterDefault",
    register_readonly_flags="hipHostRegisterReadOnly",  # newer HIP only; hip-python 10 lacks it
    no_device_codes=("hipErrorNoDevice",),
    no_driver_codes=("hipErrorInsufficientDriver",),
    driver_lib="libamdhip64.so",
    driver_name="ROCm runtime",
    distributions=("hip-python",),
)

UMA_ARCHS = frozenset({"gfx1103", "gfx1150", "gfx1151", "gfx1152"})


def gfx_arch(gcn_arch_name: Any) -> str:
    """"gfx90a:sramecc+:xnack-" → "gfx90a" (the feature flags after the colon are not the arch)."""
    if isinstance(gcn_arch_name, (bytes, bytearray)):
        gcn_arch_name = bytes(gcn_arch_name).split(b"\0", 1)[0].decode(errors="replace")
    return str(gcn_arch_name).strip().split(":", 1)[0].lower()


def is_uma_arch(gcn_arch_name: str) -> bool:
    """Whether a gfx architecture is an APU whose VRAM is system RAM (Phoenix, Strix Point, Strix Halo)."""
    return gfx_arch(gcn_arch_name) in UMA_ARCHS


def load_hip() -> Any:
    """The hip binding module; ImportError when hip-python is not installed."""
    from hip import hip

    return hip


def format_hip_version(version: int) -> str:
    """60241134 → "6.2.41134" (HIP encodes major * 10^7 + minor * 10^5 + patch)."""
    return f"{version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"


class HipDevice(GpuDevice):
    """An AMD GPU or APU."""

    name = "hip"
    runtime = HIP_RUNTIME
    load_module = staticmethod(load_hip)
    format_version = staticmethod(format_hip_version)

    @classmethod
    def describe_arch(cls, props: Any) -> tuple[str, bool]:
        arch = gfx_arch(props.gcnArchName)
        return arch, bool(props.integrated) or arch in UMA_ARCHS
