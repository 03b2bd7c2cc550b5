"""The environment a result was measured in, collected automatically so every number carries it
(CONVENTIONS 5): the host and the model directory's file system (``io/envinfo.py``), the machine's
load-path settings under ``settings`` (``io/machine.py``, ``io/gpu_settings.py``), which device
backends can run here and why not, one device's facts when asked, and the workbench's version."""
from __future__ import annotations

import os
from typing import Any

from workbench.io.envinfo import directory_facts, host_facts
from workbench.registry import Availability


def collect_environment(directory: str | os.PathLike | None = None, device: str | None = None) -> dict[str, Any]:
    """Facts about this machine, ``directory``'s file system (default: cwd) and the device backends.

    ``device`` (e.g. "cuda:0") adds that device's DeviceInfo under "device"; it is opened for that,
    so a backend that is unavailable raises BackendUnavailable.
    """
    from workbench import __version__

    from workbench.io.machine import load_path_settings

    where = directory if directory is not None else os.getcwd()
    env: dict[str, Any] = {"workbench_version": __version__, **host_facts()}
    env.update(directory_facts(where))
    # The machine's load-path settings (read-ahead, scheduler, THP, governor, NUMA, PCIe, IOMMU …):
    # two attempts compared across machines or days differ in these as often as in code.
    env["settings"] = load_path_settings(where)
    env["backends"] = backend_availability()
    if device:
        env["device"] = device_facts(device)
    return env


def backend_availability() -> dict[str, dict[str, Any]]:
    """Every registered device backend: whether it can open a device here, and why not."""
    from workbench.upload import DEVICES, device_availability

    out = {}
    for name in DEVICES.names():
        try:
            avail = device_availability(name)
        except Exception as exc:  # noqa: BLE001 - a broken binding is a reason, not a crash of `env`
            avail = Availability(False, f"{type(exc).__name__}: {exc}")
        out[name] = {"ok": avail.ok, "reason": avail.reason}
    return out


def device_facts(spec: str) -> dict[str, Any]:
    """The DeviceInfo of ``spec`` (opened, asked, closed)."""
    from workbench.upload import open_device

    dev = open_device(spec)
    try:
        return dev.info().to_json()
    finally:
        dev.close()
