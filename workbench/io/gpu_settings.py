"""The GPUs' load-path settings: PCIe link (current and max generation and width), IOMMU mode, BAR1
size and NUMA node of every display/3D PCI device, from sysfs; the NVIDIA driver's and the GPU
bindings' versions; ``nvidia-smi``'s view of the same links where it is installed.

The link's current generation drops when a GPU idles (power saving): read at attempt start, a
``Gen1`` beside a ``Gen5`` max is an idle link, not a slow slot; both are recorded. Keys are
``gpu.<PCI address>.<setting>``; nothing is an error: unknown values say why.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from workbench.io.sysfs import is_unknown, read_or_unknown, read_text, unknown

PCI = Path("/sys/bus/pci/devices")
GPU_CLASSES = ("0x0300", "0x0302", "0x0380")  # VGA, 3D controller, other display controller
VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
# GT/s per lane → PCIe generation
GENERATIONS = {"2.5": 1, "5.0": 2, "5": 2, "8.0": 3, "8": 3, "16.0": 4, "16": 4, "32.0": 5, "32": 5, "64.0": 6,
               "64": 6}
RUNTIME_DISTRIBUTIONS = ("cuda-python", "cuda-bindings", "hip-python", "torch", "safetensors", "fastsafetensors",
                         "runai-model-streamer", "instanttensor")
SMI_TIMEOUT_S = 10.0
SMI_FIELDS = ("pci.bus_id", "name", "driver_version", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max")


def gpu_settings() -> dict[str, Any]:
    """Every GPU's link, IOMMU, BAR1 and NUMA node, the drivers and the runtimes' versions."""
    out: dict[str, Any] = {"iommu": iommu_mode()}
    gpus = sorted(p for p in PCI.glob("*") if _is_gpu(p)) if PCI.is_dir() else []
    if not gpus:
        out["gpus"] = unknown("no display or 3D controller on the PCI bus") if PCI.is_dir() else \
            unknown("no /sys/bus/pci (a container or a non-PCI machine)")
    for dev in gpus:
        out.update({f"gpu.{dev.name}.{k}": v for k, v in pci_gpu(dev).items()})
    out.update(driver_versions())
    out.update(nvidia_smi())
    return out


def _is_gpu(dev: Path) -> bool:
    try:
        return any(read_text(dev / "class").startswith(c) for c in GPU_CLASSES)
    except OSError:
        return False


def pci_gpu(dev: Path) -> dict[str, Any]:
    """One PCI GPU from sysfs: vendor, link now and at most, IOMMU group type, BAR1 bytes, NUMA node."""
    vendor = read_or_unknown(dev / "vendor", "vendor")
    numa = read_or_unknown(dev / "numa_node", "numa_node")
    return {
        "vendor": VENDORS.get(vendor, vendor),
        "pcie_current": _link(dev, "current"), "pcie_max": _link(dev, "max"),
        "iommu": _group_type(dev), "bar1_bytes": bar_size(dev, 1),
        "numa_node": unknown("the platform does not say (numa_node -1)") if numa == "-1" else numa,
    }


def _link(dev: Path, which: str) -> str:
    """``Gen4 x16`` from ``<which>_link_speed`` (``16.0 GT/s PCIe``) and ``<which>_link_width``."""
    speed = read_or_unknown(dev / f"{which}_link_speed", "link speed")
    width = read_or_unknown(dev / f"{which}_link_width", "link width")
    if is_unknown(speed) or is_unknown(width):
        return speed if is_unknown(speed) else width
    gts = speed.split()[0] if speed else ""
    gen = GENERATIONS.get(gts)
    return f"{'Gen' + str(gen) if gen else speed} x{width}"


def _group_type(dev: Path) -> str:
    """The device's IOMMU translation: ``identity`` (passthrough), ``DMA``/``DMA-FQ`` (translated)."""
    group = dev / "iommu_group"
    if not group.exists():
        return "off (no IOMMU group)"
    return read_or_unknown(group / "type", "IOMMU group type")


def bar_size(dev: Path, bar: int) -> int | str:
    """Bytes of BAR ``bar`` from the device's ``resource`` table (start, end, flags per line)."""
    try:
        lines = read_text(dev / "resource").splitlines()
        start, end = (int(x, 16) for x in lines[bar].split()[:2])
    except (OSError, IndexError, ValueError) as exc:
        return unknown(f"BAR{bar}: {getattr(exc, 'strerror', None) or exc}")
    return end - start + 1 if end > start else unknown(f"BAR{bar} not assigned")


def iommu_mode() -> str:
    """``on (N groups)``, from /sys/class/iommu and /sys/kernel/iommu_groups, else ``off``."""
    units = list(Path("/sys/class/iommu").glob("*")) if Path("/sys/class/iommu").is_dir() else []
    groups = list(Path("/sys/kernel/iommu_groups").glob("*")) if Path("/sys/kernel/iommu_groups").is_dir() else []
    if units or groups:
        return f"on ({len(units)} units, {len(groups)} groups)"
    return "off (no IOMMU unit in /sys/class/iommu)"


def driver_versions() -> dict[str, Any]:
    """The GPU kernel drivers' versions and the installed GPU bindings' (importlib.metadata: no import)."""
    from importlib import metadata

    out: dict[str, Any] = {}
    nvidia = Path("/proc/driver/nvidia/version")
    if nvidia.exists():
        first = read_or_unknown(nvidia, "NVIDIA driver").splitlines()[0]
        out["driver_nvidia"] = " ".join(first.split())
    amd = Path("/sys/module/amdgpu/version")
    if amd.exists():
        out["driver_amdgpu"] = read_or_unknown(amd, "amdgpu version")
    for dist in RUNTIME_DISTRIBUTIONS:
        try:
            out[f"runtime.{dist}"] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def nvidia_smi() -> dict[str, Any]:
    """nvidia-smi's name, driver and PCIe link per GPU (``smi.<bus id>.<field>``); nothing without it."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    cmd = [smi, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"smi": unknown(f"nvidia-smi failed: {exc}")}
    if done.returncode != 0:
        return {"smi": unknown(f"nvidia-smi exit {done.returncode}: {(done.stderr or done.stdout).strip()[:120]}")}
    out: dict[str, Any] = {}
    for line in done.stdout.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(SMI_FIELDS):
            continue
        row = dict(zip(SMI_FIELDS, values))
        bus = row.pop("pci.bus_id").lower()[-12:]  # 00000000:17:00.0 → 0000:17:00.0, sysfs's form
        out[f"smi.{bus}.name"] = row["name"]
        out[f"smi.{bus}.driver"] = row["driver_version"]
        out[f"smi.{bus}.pcie_current"] = f"Gen{row['pcie.link.gen.current']} x{row['pcie.link.width.current']}"
        out[f"smi.{bus}.pcie_max"] = f"Gen{row['pcie.link.gen.max']} x{row['pcie.link.width.max']}"
    return out
