"""The machine's load-path settings: what decides how fast a model file reaches memory, besides the code.

The model's file system and mount options; its block device's ``read_ahead_kb``, I/O scheduler and
rotational flag; transparent huge pages; the CPU's model, governor and current frequency; NUMA nodes
of the CPUs this process may run on and of the memory; the kernel and its command line; swap. GPUs
(PCIe link, IOMMU, BAR1, NUMA node, driver and runtime versions) are in :mod:`workbench.io.gpu_settings`.

Every value comes from /proc or /sys (cheap, no root needed). One that cannot be read is the text
``unknown (why)``, never an error: a container without /sys, a virtual disk, a CPU without cpufreq.
The result is a flat ``{name: value}`` so two attempts' settings can be compared key by key.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from workbench.io.sysfs import is_unknown, read_or_unknown, read_text, unknown

GiB = 1 << 30


def bracketed(text: str) -> str:
    """The selected word of a sysfs choice list: ``none [mq-deadline] kyber`` → ``mq-deadline``."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text


def load_path_settings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every load-path setting of this machine for a model at ``path`` (a file or its directory)."""
    from workbench.io.gpu_settings import gpu_settings

    settings: dict[str, Any] = {}
    for part in (storage_settings(path), memory_settings(), cpu_settings(), kernel_settings(), gpu_settings()):
        settings.update(part)
    return settings


# -- storage ----------------------------------------------------------------------------------------


def storage_settings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """File system, mount point and options of ``path``; its block device's read-ahead, scheduler and
    rotational flag (a partition's come from its disk)."""
    real = os.path.realpath(path)
    try:
        dev = os.stat(real).st_dev
    except OSError as exc:
        why = unknown(f"{real}: {exc.strerror}")
        return {k: why for k in ("fs_type", "mount_point", "mount_options", "block_device", "read_ahead_kb",
                                 "io_scheduler", "rotational")}
    out = _mount(real, dev)
    out.update(block_device_settings(os.major(dev), os.minor(dev)))
    return out


def _mount(real: str, dev: int) -> dict[str, Any]:
    """The mountinfo line of the mount holding ``real``: per-mount and super-block options together."""
    best: tuple[int, dict[str, Any]] | None = None
    try:
        lines = read_text("/proc/self/mountinfo").splitlines()
    except OSError as exc:
        why = unknown(f"/proc/self/mountinfo: {exc.strerror}")
        return {"fs_type": why, "mount_point": why, "mount_options": why}
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 6 or len(rest) < 2:
            continue
        point = _unescape(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):  # later mounts shadow earlier ones
            options = fields[5] + (f" (super: {rest[2]})" if len(rest) > 2 else "")
            best = (len(point), {"fs_type": rest[0], "mount_point": point, "mount_options": options,
                                 "fs_source": _unescape(rest[1])})
    if best is None:
        why = unknown(f"no mount of {real} in /proc/self/mountinfo")
        return {"fs_type": why, "mount_point": why, "mount_options": why}
    return best[1]


def _unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def block_device_settings(major: int, minor: int) -> dict[str, Any]:
    """read_ahead_kb, scheduler and rotational of block device ``major:minor`` (its disk's queue for a
    partition); unknown with why for a file system on no block device (tmpfs, overlay, NFS)."""
    keys = ("read_ahead_kb", "io_scheduler", "rotational")
    node = Path(f"/sys/dev/block/{major}:{minor}")
    if major == 0 or not node.exists():
        why = unknown(f"no block device behind device {major}:{minor} (a virtual or network file system)")
        return {"block_device": why, **dict.fromkeys(keys, why)}
    real = node.resolve()
    queue = real / "queue" if (real / "queue").is_dir() else real.parent / "queue"  # a partition: its disk
    values = {
        "block_device": f"{real.name} ({major}:{minor})",
        "read_ahead_kb": _int_or_unknown(queue / "read_ahead_kb", "read_ahead_kb"),
        "io_scheduler": bracketed(read_or_unknown(queue / "scheduler", "scheduler")),
        "rotational": _int_or_unknown(queue / "rotational", "rotational"),
    }
    return values


def _int_or_unknown(path: Path, what: str) -> int | str:
    text = read_or_unknown(path, what)
    try:
        return int(text)
    except ValueError:
        return text if is_unknown(text) else unknown(f"{what}: {text!r} is no number")


# -- memory, CPU, kernel ----------------------------------------------------------------------------


def memory_settings() -> dict[str, Any]:
    """Transparent huge pages (enabled, defrag), swap (total, used, swappiness), NUMA memory per node."""
    thp = Path("/sys/kernel/mm/transparent_hugepage")
    meminfo = _meminfo("/proc/meminfo")
    out: dict[str, Any] = {
        "thp_enabled": bracketed(read_or_unknown(thp / "enabled", "transparent huge pages")),
        "thp_defrag": bracketed(read_or_unknown(thp / "defrag", "transparent huge pages")),
        "swappiness": _int_or_unknown(Path("/proc/sys/vm/swappiness"), "swappiness"),
    }
    if "SwapTotal" in meminfo:
        out["swap_total_bytes"] = meminfo["SwapTotal"]
        out["swap_used_bytes"] = meminfo["SwapTotal"] - meminfo.get("SwapFree", 0)
    else:
        out["swap_total_bytes"] = out["swap_used_bytes"] = unknown("no SwapTotal in /proc/meminfo")
    out.update(numa_settings())
    return out


def _meminfo(path: str | Path) -> dict[str, int]:
    """``/proc/meminfo`` (or a node's meminfo) in bytes, by key."""
    out = {}
    try:
        lines = read_text(path).splitlines()
    except OSError:
        return {}
    for line in lines:
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            out[key.split()[-1]] = int(parts[0]) * (1024 if parts[-1] == "kB" else 1)
    return out


def numa_settings() -> dict[str, Any]:
    """The NUMA nodes, each node's memory, and the nodes of the CPUs this process may run on."""
    root = Path("/sys/devices/system/node")
    online = read_or_unknown(root / "online", "NUMA nodes")
    if is_unknown(online):
        return {"numa_nodes": online, "numa_memory": online, "cpu_numa_nodes": online}
    nodes = sorted(int(p.name[4:]) for p in root.glob("node[0-9]*"))
    memory = ", ".join(f"node{n} {_meminfo(root / f'node{n}' / 'meminfo').get('MemTotal', 0) / GiB:.1f} GiB"
                       for n in nodes)
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = set(range(os.cpu_count() or 0))
    mine = sorted({n for n in nodes for c in cpus if (root / f"node{n}" / f"cpu{c}").exists()})
    return {"numa_nodes": online, "numa_memory": memory or unknown("no node directories"),
            "cpu_numa_nodes": ",".join(map(str, mine)) or unknown("no CPU of this process under a node")}


def cpu_settings() -> dict[str, Any]:
    """The CPU model, cpufreq governor and current frequency (MHz) of the first CPU this process may use."""
    from workbench.io.envinfo import cpu_model

    try:
        first = min(os.sched_getaffinity(0))
    except (AttributeError, OSError, ValueError):
        first = 0
    freq = Path(f"/sys/devices/system/cpu/cpu{first}/cpufreq")
    if freq.is_dir():
        governor = read_or_unknown(freq / "scaling_governor", "cpufreq governor")
        khz = _int_or_unknown(freq / "scaling_cur_freq", "cpufreq")
        mhz: Any = round(khz / 1000) if isinstance(khz, int) else khz
    else:
        governor = unknown(f"no cpufreq for cpu{first}: a VM, or no cpufreq driver")
        mhz = _cpuinfo_mhz() or governor
    return {"cpu_model": cpu_model(), "cpu_governor": governor, "cpu_mhz": mhz}


def _cpuinfo_mhz() -> int | None:
    try:
        for line in read_text("/proc/cpuinfo").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "cpu MHz":
                return round(float(value))
    except (OSError, ValueError):
        pass
    return None


def kernel_settings() -> dict[str, Any]:
    """The kernel release and its command line (``iommu=pt``, ``transparent_hugepage=`` … live there)."""
    return {"kernel_release": os.uname().release,
            "kernel_cmdline": read_or_unknown("/proc/cmdline", "kernel command line")}
