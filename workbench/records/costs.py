"""What one load cost besides time, measured over its window by the worker: bytes read (by the process
and from the model's block device), CPU seconds, context switches, and the memory the load took —
peak RSS, page-locked host memory at its peak, device bytes beyond the model's own, and the model's
page-cache footprint before and after.

A counter that cannot be read here is None with its reason in ``unknown`` (no /proc/self/io in some
containers, a model on tmpfs has no block device); never a made-up zero.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

# Columns of runs.csv, in this order (the names are the fields').
COST_FIELDS = ("process_read_bytes", "process_rchar_bytes", "disk_read_bytes", "user_s", "system_s",
               "voluntary_switches", "involuntary_switches", "rss_before_bytes", "peak_rss_bytes",
               "pinned_peak_bytes", "registered_peak_bytes", "device_extra_bytes", "page_cache_before_bytes",
               "page_cache_after_bytes")


@dataclass(frozen=True)
class RunCosts:
    """One run's counters over its load window (bytes, seconds, counts)."""

    process_read_bytes: int | None = None  # /proc/self/io read_bytes: fetched from storage for us
    process_rchar_bytes: int | None = None  # /proc/self/io rchar: through read calls, page cache included
    disk_read_bytes: int | None = None  # /proc/diskstats sectors read × 512 on the model's device(s), all processes
    disk_devices: tuple[str, ...] = ()
    user_s: float | None = None
    system_s: float | None = None
    voluntary_switches: int | None = None
    involuntary_switches: int | None = None
    rss_before_bytes: int | None = None  # VmRSS when the window opened
    peak_rss_bytes: int | None = None  # VmHWM when it closed: the process's peak, start-up included
    pinned_peak_bytes: int | None = None  # cudaHostAlloc'd (or mlock'd on host) staging at its highest
    registered_peak_bytes: int | None = None  # host ranges registered with the device at their highest
    device_extra_bytes: int | None = None  # device memory the load holds beyond the model's tensor bytes
    device_bytes_source: str = ""  # "mem_info" (the driver's free memory) or "allocations" (ours)
    page_cache_before_bytes: int | None = None  # the model's resident bytes (mincore) when the window opened
    page_cache_after_bytes: int | None = None  # … and when it closed
    unknown: Mapping[str, str] = field(default_factory=dict)  # field → why it is None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(disk_devices=list(self.disk_devices), unknown=dict(self.unknown))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunCosts:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["disk_devices"] = tuple(map(str, values.get("disk_devices") or ()))
        values["unknown"] = {str(k): str(v) for k, v in (values.get("unknown") or {}).items()}
        return cls(**values)

    def columns(self) -> dict[str, Any]:
        """The counters as runs.csv columns."""
        return {name: getattr(self, name) for name in COST_FIELDS}
