"""Ceilings carry their date and the load-path settings they were measured under: an attempt held
against a wall measured long ago, or under other settings (another file system, read-ahead, governor,
PCIe link …), says so, and ``workbench ceilings --refresh`` measures them again the way they were.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from workbench.records import format_differences, settings_differences

if TYPE_CHECKING:
    from workbench.ledger import Ledger

REFRESH_HINT = "`workbench ceilings --refresh` re-measures"


def ceiling_caveat(ledger: Ledger, name: str, environment: Mapping[str, Any] | None, *, host: str | None = None,
                   max_age_days: float | None = None, now: datetime | None = None) -> str:
    """One line when the ceiling ``name`` of ``host`` is older than ``max_age_days`` (default
    ``$WORKBENCH_CEILINGS_MAX_AGE_DAYS``, 30) or was measured under settings other than
    ``environment``'s; '' when it is fresh and measured under the same settings."""
    from workbench.settings import defaults

    frame = ledger.ceilings(host=host or defaults.host_id())
    rows = frame[frame["name"] == name]
    if rows.empty:
        return ""
    measured, detail = str(rows["measured_at"].iloc[0]), rows["detail"].iloc[0] or {}
    limit = defaults.ceilings_max_age_days() if max_age_days is None else max_age_days
    parts = []
    age = _age_days(measured, now)
    if age is not None and age > limit:
        parts.append(f"measured {measured[:10]}, {age:.0f} days ago (over {limit:g})")
    theirs = detail.get("settings") if isinstance(detail, Mapping) else None
    if theirs is None:
        parts.append(f"measured {measured[:10]} without its settings recorded")
    else:
        ours = (environment or {}).get("settings")
        diffs = settings_differences({"settings": theirs}, {"settings": ours}) if isinstance(ours, Mapping) else None
        if diffs:
            parts.append(f"measured {measured[:10]} under other settings: {format_differences(diffs, limit=4)}")
    # " · " between the parts: the runner joins an attempt's notes with "; "
    return f"ceiling {name} {' · '.join(parts)} — {REFRESH_HINT}" if parts else ""


def _age_days(measured_at: str, now: datetime | None) -> float | None:
    try:
        then = datetime.fromisoformat(measured_at)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    return ((now or datetime.now(timezone.utc)) - then).total_seconds() / 86400


def refresh_plan(ledger: Ledger, host: str | None = None) -> dict[str, Any]:
    """How this host's ceilings were measured, to measure them again: the directory and scratch size
    of the latest ones, the device backends of its host→device walls, and the model file whose whole
    reads it recorded (if that file still exists).

    Raises
    ------
    ParamError
        When the host has no ceilings, or the directory they were measured in is gone.
    """
    import os

    from workbench.settings import defaults
    from workbench.errors import ParamError

    who = host or defaults.host_id()
    frame = ledger.ceilings(host=who)
    if frame.empty:
        raise ParamError("workbench ceilings", "--refresh",
                         f"no ceilings recorded for host {who} in {ledger.path}: run `workbench ceilings` first")
    details = [d if isinstance(d, Mapping) else {} for d in frame["detail"]]
    directories = Counter(str(d["directory"]) for d in details if d.get("directory"))
    sizes = Counter(int(d["size"]) for d in details if d.get("size"))
    devices = sorted({str(d["device"]) for d in details if d.get("device")})
    # a whole-model read names the model (a set's index, directory or first shard) and the file it read
    models = [str(d.get("model") or d["file"]) for d in details if d.get("model") or d.get("file")]
    files = [m for m in models if os.path.exists(m)]
    plan: dict[str, Any] = {"devices": tuple(devices) or ("host",)}
    if directories:
        directory = directories.most_common(1)[0][0]
        if not os.path.isdir(directory):
            raise ParamError("workbench ceilings", "--refresh",
                             f"{directory}, where the ceilings were measured, is gone: give --dir")
        plan["directory"] = directory
    if sizes:
        plan["size"] = sizes.most_common(1)[0][0]
    if files:
        plan["file"] = files[0]
    return plan
