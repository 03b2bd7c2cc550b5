"""A GPU binding as the shared backend sees it: which function plays which role (:class:`GpuRuntime`,
:func:`call_names`), calling it with its errors turned into one line, probing whether it can run here,
its version, and the handles the backend keeps (events, host registrations, allocation arenas).
:mod:`workbench.upload._gpu` builds the device on it.
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from workbench.errors import DeviceError
from workbench.registry import Availability


_ROLES = {  # role → function name after the prefix; the two that differ are passed as overrides
    "device_count": "GetDeviceCount", "set_device": "SetDevice", "properties": "GetDeviceProperties",
    "driver_version": "DriverGetVersion", "runtime_version": "RuntimeGetVersion",
    "error_string": "GetErrorString", "malloc": "Malloc", "free": "Free", "memcpy": "Memcpy",
    "memcpy_async": "MemcpyAsync", "stream_create": "StreamCreate", "stream_destroy": "StreamDestroy",
    "device_sync": "DeviceSynchronize", "event_create": "EventCreate", "event_record": "EventRecord",
    "event_sync": "EventSynchronize", "event_destroy": "EventDestroy", "host_register": "HostRegister",
    "host_unregister": "HostUnregister", "mem_info": "MemGetInfo",
}


def call_names(prefix: str, **overrides: str) -> dict[str, str]:
    """Role → function name for a binding whose functions are ``prefix + Name``."""
    names = {role: prefix + suffix for role, suffix in _ROLES.items()}
    names.update(overrides)
    return names


@dataclass(frozen=True)
class GpuRuntime:
    """What one binding calls things; everything else about the backend is shared."""

    backend: str  # registry name: "cuda", "hip"
    prefix: str  # "cuda", "hip": error enum ``{prefix}Error_t``, ``{prefix}MemcpyKind``
    calls: Mapping[str, str]  # role → function name, from :func:`call_names`
    pinned_flags: str  # module constant for page-locked host allocations
    write_combined_flags: str  # module constant for write-combined page-locked host allocations
    register_flags: str  # module constant for host registration
    register_readonly_flags: str  # for read-only mappings; a binding may lack it
    no_device_codes: tuple[str, ...]  # error names meaning "driver fine, no device"
    no_driver_codes: tuple[str, ...]  # error names meaning "runtime present, driver missing or old"
    driver_lib: str  # the shared library whose absence means "no driver"
    driver_name: str  # "NVIDIA driver", "ROCm runtime"
    distributions: tuple[str, ...] = field(default=())  # pip names whose version is the binding's


@dataclass(frozen=True)
class HostRegistration:
    """A host range page-locked by :meth:`GpuDevice.register_host`."""

    addr: int
    nbytes: int
    read_only: bool


class _Arena:
    """One device allocation carved into several buffers; freed when the last of them is freed."""

    __slots__ = ("raw", "live")

    def __init__(self, raw: Any, live: int):
        self.raw, self.live = raw, live


class GpuEvent:
    """A marker recorded on the device's copy stream."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any):
        self.handle = handle


def host_address(src: Any) -> tuple[int, int]:
    """Address and length of any contiguous buffer (bytes, bytearray, read-only mmap memoryview)."""
    arr = np.frombuffer(src, dtype=np.uint8)
    # __array_interface__ rather than .ctypes.data: half the cost, and this runs once per copy
    return int(arr.__array_interface__["data"][0]), int(arr.nbytes)


def _error_name(err: Any) -> str:
    return str(getattr(err, "name", err))


def describe_error(module: Any, rt: GpuRuntime, err: Any) -> str:
    """The runtime's own text for an error code; empty if even that call fails."""
    try:
        text = getattr(module, rt.calls["error_string"])(err)
    except Exception:  # the driver may be too broken to describe itself; the code still names it
        return ""
    text = text[-1] if isinstance(text, tuple) else text
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)


def call_runtime(module: Any, rt: GpuRuntime, device: str, role: str, *args: Any) -> Any:
    """Call ``role`` on the binding; raise DeviceError naming the call unless it returned success."""
    name = rt.calls[role]
    result = getattr(module, name)(*args)
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != getattr(getattr(module, f"{rt.prefix}Error_t"), f"{rt.prefix}Success"):
        raise DeviceError(device, name, _error_name(err), describe_error(module, rt, err))
    return rest[0] if len(rest) == 1 else (rest or None)


def probe_runtime(rt: GpuRuntime, load: Callable[[], Any]) -> Availability:
    """Module missing, no driver, no device, or available: the first that applies."""
    try:
        module = load()
    except ImportError:
        return Availability(False, f"module missing: {rt.backend} Python bindings not importable")
    count_call = rt.calls["device_count"]
    try:
        count = call_runtime(module, rt, rt.backend, "device_count")
    except DeviceError as exc:
        if exc.code in rt.no_device_codes:
            return Availability(False, f"no device: {count_call} returned 0")
        kind = "no driver" if exc.code in rt.no_driver_codes else "no device"
        return Availability(False, f"{kind}: {count_call}: {exc.code} ({exc.detail})")
    except (RuntimeError, OSError) as exc:  # the binding dlopens the runtime on first call
        text = str(exc)
        if "dlopen" in text or rt.driver_lib in text:
            return Availability(False, f"no driver: {rt.driver_lib} not found ({rt.driver_name} missing)")
        return Availability(False, f"no driver: {text}")
    if not count:
        return Availability(False, f"no device: {count_call} returned 0")
    return Availability(True)


def binding_version(rt: GpuRuntime) -> str:
    """``"cuda-bindings 13.0.1"``: the first installed distribution of the binding."""
    for dist in rt.distributions:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return rt.distributions[0] if rt.distributions else rt.prefix


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value).strip("\0 ")
