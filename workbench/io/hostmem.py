"""Whether this machine hands freed memory back to a hypervisor, which distorts load timings.

On VMs with virtio-balloon *free page reporting* (Firecracker guests here, the H200 box among them),
free guest pages are reported to the host and discarded there; the next touch of such a page faults
through the hypervisor. Measured on this workplace's 2-core VM: first touch of 6 GiB of fresh
anonymous memory 0.43 GB/s, the same touch right after 5-6 GB/s. A load that allocates buffers or
refills an evicted page cache pays that toll at random, so the runner records how much memory was
reported around each run and the CLI says so.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

REPORTING_PARAMS = Path("/sys/module/page_reporting/parameters")


def _read_int(name: str) -> int | None:
    try:
        return int((REPORTING_PARAMS / name).read_text().strip())
    except (OSError, ValueError):
        return None


def reported_kib() -> int | None:
    """KiB of free memory reported to the hypervisor since boot, or None where the kernel has no counter."""
    return _read_int("reported_kib")


def memory_reporting() -> dict[str, Any]:
    """``{active, order, reported_gib, detail}`` for ``workbench env`` and every attempt's environment."""
    if not REPORTING_PARAMS.is_dir():
        return {"active": False, "detail": "no free page reporting (no /sys/module/page_reporting)"}
    order, total = _read_int("page_reporting_order"), reported_kib()
    gib = None if total is None else round(total / 2**20, 1)
    return {"active": True, "order": order, "reported_gib": gib,
            "detail": f"free page reporting on (order {order}): freed memory goes back to the hypervisor "
                      f"and its next first touch faults through it; {gib} GiB reported since boot"}
