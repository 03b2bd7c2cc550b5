"""The worker's counters around its load window → :class:`~workbench.records.RunCosts`.

:meth:`CostProbe.open` runs just before the window opens (after device init and the strategy's
``prepare``), :meth:`CostProbe.close` just after it closes (before verification reads the device
back); what they read between the two clocks — mincore over the model's files, the driver's free
memory — is outside the window. The model's files come from the runner (``files`` in the worker's
config, resolved in the parent), so the worker reads no index before its window.
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Any, Sequence

from workbench.io.proc_status import status_bytes
from workbench.records import RunCosts

SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size


@dataclass(frozen=True)
class _Counters:
    io: dict[str, int] | None
    disk: dict[str, int]
    usage: Any  # resource.struct_rusage
    rss: int | None


def _read_counters(devices: Sequence[tuple[int, int]]) -> _Counters:
    return _Counters(_proc_io(), _disk_sectors(devices), resource.getrusage(resource.RUSAGE_SELF),
                     status_bytes("VmRSS"))


def _proc_io() -> dict[str, int] | None:
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            return {k.strip(): int(v) for k, v in (line.split(":") for line in fh if ":" in line)}
    except (OSError, ValueError):
        return None


def _disk_sectors(devices: Sequence[tuple[int, int]]) -> dict[str, int]:
    """Sectors read so far per device (``name (major:minor)``) among ``devices``."""
    wanted, out = set(devices), {}
    try:
        with open("/proc/diskstats", encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 5 and (int(parts[0]), int(parts[1])) in wanted:
                    out[f"{parts[2]} ({parts[0]}:{parts[1]})"] = int(parts[5])
    except (OSError, ValueError):
        return {}
    return out


def _resident_bytes(files: Sequence[str]) -> int | None:
    from workbench.io.pagecache import page_size, resident_pages

    try:
        return sum(min(resident_pages(f)[0] * page_size(), os.path.getsize(f)) for f in files)
    except (OSError, ValueError):
        return None
    except Exception:  # noqa: BLE001 - a WorkbenchError (a special file): the footprint is unknown
        return None


class CostProbe:
    """Reads the counters before and after one load window on ``device``."""

    def __init__(self, files: Sequence[str], device: Any):
        self.files = [f for f in files if os.path.isfile(f)]
        self.device = device
        devs = []
        for f in self.files:
            st = os.stat(f)
            devs.append((os.major(st.st_dev), os.minor(st.st_dev)))
        self.devices = sorted(set(devs))
        self.unknown: dict[str, str] = {}

    def open(self) -> None:
        """Just before the window: the model's footprint, the device's free memory, then the counters."""
        self.cache_before = _resident_bytes(self.files)
        self.free_before = self._device_free()
        self.device.locked.reset()
        self.before = _read_counters(self.devices)

    def close(self, model_bytes: int) -> RunCosts:
        """Just after the window: the counters first, then what is read at leisure."""
        after = _read_counters(self.devices)
        peak_rss = status_bytes("VmHWM")
        pinned, registered = self.device.locked.peak["pinned"], self.device.locked.peak["registered"]
        extra, source = self._device_extra(model_bytes)
        cache_after = _resident_bytes(self.files)
        b, a = self.before, after
        io = _delta_io(b.io, a.io, self.unknown)
        disk = self._disk_delta(b.disk, a.disk)
        if self.cache_before is None:
            self.unknown["page_cache_before_bytes"] = "mincore failed on the model's files"
        return RunCosts(
            process_read_bytes=io[0], process_rchar_bytes=io[1], disk_read_bytes=disk,
            disk_devices=tuple(sorted(a.disk)), user_s=a.usage.ru_utime - b.usage.ru_utime,
            system_s=a.usage.ru_stime - b.usage.ru_stime, voluntary_switches=a.usage.ru_nvcsw - b.usage.ru_nvcsw,
            involuntary_switches=a.usage.ru_nivcsw - b.usage.ru_nivcsw, rss_before_bytes=b.rss,
            peak_rss_bytes=peak_rss, pinned_peak_bytes=pinned, registered_peak_bytes=registered,
            device_extra_bytes=extra, device_bytes_source=source, page_cache_before_bytes=self.cache_before,
            page_cache_after_bytes=cache_after, unknown=dict(self.unknown))

    def _disk_delta(self, before: dict[str, int], after: dict[str, int]) -> int | None:
        if not self.devices:
            self.unknown["disk_read_bytes"] = "the model's files were not named to the worker"
            return None
        if not after:
            self.unknown["disk_read_bytes"] = ("no block device behind the model's file system in "
                                               "/proc/diskstats (tmpfs, overlay, network)")
            return None
        return sum(after[k] - before.get(k, after[k]) for k in after) * SECTOR

    def _device_free(self) -> int | None:
        free = getattr(self.device, "memory_free", None)
        try:
            return int(free()) if free is not None else None
        except Exception:  # noqa: BLE001 - a driver that cannot say: fall back to our allocations
            return None

    def _device_extra(self, model_bytes: int) -> tuple[int | None, str]:
        """Device bytes the load holds beyond the model's: the driver's free-memory drop when it
        reports one (peers' and frameworks' allocations included), else our own allocations."""
        free_after = self._device_free()
        if self.free_before is not None and free_after is not None:
            return self.free_before - free_after - model_bytes, "mem_info"
        usage = self.device.usage()
        if usage is None:
            self.unknown["device_extra_bytes"] = "the backend counts no allocations"
            return None, ""
        return usage.buffer_bytes - model_bytes, "allocations"


def _delta_io(before: dict[str, int] | None, after: dict[str, int] | None,
              unknown: dict[str, str]) -> tuple[int | None, int | None]:
    if before is None or after is None:
        why = "/proc/self/io unreadable here"
        unknown.update(process_read_bytes=why, process_rchar_bytes=why)
        return None, None
    return after.get("read_bytes", 0) - before.get("read_bytes", 0), after.get("rchar", 0) - before.get("rchar", 0)
