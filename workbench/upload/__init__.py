"""Device backends behind one interface, by name: ``host``, ``host-uma``, ``cuda``, ``hip``."""
from __future__ import annotations

from workbench.errors import BackendUnavailable
from workbench.registry import Availability, Registry
from workbench.upload.base import Device, DeviceBuffer, DeviceInfo, DeviceUsage, HostStaging

DEVICES: Registry[Device] = Registry(
    "device",
    {
        "host": ("workbench.upload.host:HostDevice", ""),
        "host-uma": ("workbench.upload.host:HostUmaDevice", ""),
        "cuda": ("workbench.upload.cuda:CudaDevice", "pip install 'workbench[cuda]' and an NVIDIA driver"),
        "hip": ("workbench.upload.hip:HipDevice", "pip install 'workbench[hip]' and ROCm (libamdhip64.so)"),
    },
)


def device_availability(name: str) -> Availability:
    """Whether backend ``name`` can open a device here, with the reason when it cannot."""
    try:
        cls = DEVICES.get(name)
    except ImportError as exc:
        return Availability(False, f"module missing: {exc}")
    return cls.available()


def open_device(spec: str = "host") -> Device:
    """Open ``"name"`` or ``"name:ordinal"`` (e.g. ``"cuda:1"``); raises BackendUnavailable."""
    name, _, ordinal = spec.partition(":")
    entry = DEVICES.entries.get(name)
    avail = device_availability(name)  # UnknownName for a bad name, before anything else
    if not avail:
        raise BackendUnavailable(name, avail.reason, entry.hint if entry else "")
    return DEVICES.get(name)(int(ordinal or 0))


def best_device() -> str:
    """The first available of cuda, hip, host."""
    for name in ("cuda", "hip"):
        if device_availability(name):
            return name
    return "host"


__all__ = ["DEVICES", "Device", "DeviceBuffer", "DeviceInfo", "DeviceUsage", "HostStaging", "best_device",
           "device_availability", "open_device"]
