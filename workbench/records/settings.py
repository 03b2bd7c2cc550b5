"""Which load-path settings differ between two environments (two attempts, or an attempt and the
ceilings it is held against).

An attempt's environment holds the machine's settings under ``settings`` (flat ``{name: value}``,
see ``workbench/io/machine.py``) beside a few facts that change what a load costs (kernel, Python,
the workbench's commit, the device's driver and binding). Readings that move by themselves from one
minute to the next — the CPU's current frequency, swap in use, a GPU link's current generation
(idle links downshift) — are states, not settings, and are never called a difference.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

VOLATILE_SUFFIXES = ("cpu_mhz", "swap_used_bytes", ".pcie_current")
TOP_LEVEL = ("kernel", "python", "workbench_version", "git_commit", "cpu_model", "cores_usable", "ram_bytes")
DEVICE_KEYS = ("name", "driver", "binding")
# amounts of memory a VM's balloon or page reporting moves by a little from one minute to the next
# ("node0 10.0 GiB" → "node0 10.1 GiB"): the same setting while every figure is within AMOUNT_TOLERANCE
AMOUNTS = ("numa_memory", "ram_bytes")
AMOUNT_TOLERANCE = 0.05
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def comparable_settings(environment: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The settings of an environment that a comparison looks at, flat; None when it recorded none
    (attempts made before settings were recorded)."""
    env = environment or {}
    settings = env.get("settings")
    if not isinstance(settings, Mapping):
        return None
    out = {k: v for k, v in settings.items() if not str(k).endswith(VOLATILE_SUFFIXES)}
    out.update({k: env[k] for k in TOP_LEVEL if k in env})
    device = env.get("device")
    if isinstance(device, Mapping):
        out.update({f"device.{k}": device[k] for k in DEVICE_KEYS if device.get(k)})
    return out


def settings_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None
                         ) -> list[tuple[str, Any, Any]] | None:
    """``[(name, value in a, value in b)]`` for every compared setting that differs, in name order
    (one missing on a side reads ``absent``); None when either environment recorded no settings."""
    left, right = comparable_settings(a), comparable_settings(b)
    if left is None or right is None:
        return None
    return [(k, left.get(k, "absent"), right.get(k, "absent")) for k in sorted(set(left) | set(right))
            if not _same(k, left.get(k, "absent"), right.get(k, "absent"))]


def _same(key: str, a: Any, b: Any) -> bool:
    if a == b:
        return True
    if key not in AMOUNTS:
        return False
    x, y = _NUMBER.findall(str(a)), _NUMBER.findall(str(b))
    return (_NUMBER.sub("#", str(a)) == _NUMBER.sub("#", str(b)) and len(x) == len(y)
            and all(abs(float(i) - float(j)) <= AMOUNT_TOLERANCE * max(float(i), float(j)) for i, j in zip(x, y)))


def format_differences(diffs: list[tuple[str, Any, Any]], limit: int = 6, width: int = 40) -> str:
    """``read_ahead_kb 128 → 8192, io_scheduler none → mq-deadline (+2 more)``; long values shortened."""
    def short(value: Any) -> str:
        text = str(value)
        return text if len(text) <= width else text[:width - 1] + "…"

    parts = [f"{k} {short(x)} → {short(y)}" for k, x, y in diffs[:limit]]
    rest = len(diffs) - limit
    return ", ".join(parts) + (f" (+{rest} more)" if rest > 0 else "")
