"""The grade of an external engine's run, from the kernel's event record of its window.

Per file of the model (:mod:`workbench.io.fileevents`): its pages read by the tree's read calls, touched
by the tree's own page faults in its mappings of it, mapped, and moved by ``sendfile``/``splice``. A file
is credited with its pages read or touched (each page once); the run is credited — ``bytes-read`` or
``mapping-touched``, whichever moved more, and a GB/s — when the files' credit covers
:data:`~workbench.measure.engine.evidence.EVIDENCE_FRACTION` of the model's tensor bytes. Anything weaker
is named and shows time only: ``mapped-only`` (mapped, populated, never shown touched), ``opened-only``
(opened, read in part, or spliced elsewhere), ``none``.
"""
from __future__ import annotations

from typing import Any

from workbench.io.fileevents import FileEvents
from workbench.records import ReadEvidence


def judge_events(s: Any, events: FileEvents, resident_after: tuple[int, ...] | None, fraction: float) -> ReadEvidence:
    """The evidence of a run whose window the kernel recorded (``s``: the
    :class:`~workbench.measure.engine.sampler.TreeSampler`, for its counters and opens)."""
    model = s.model
    sizes = list(model.sizes) or [model.nbytes] * len(model.paths)
    clamp = (lambda per: sum(min(v, z) for v, z in zip(per, sizes)))
    read, touched, spliced, mapped = (clamp(events.read), clamp(events.touched), clamp(events.spliced),
                                      clamp(events.mapped))
    seen = clamp(events.credited)
    grade, basis = _grade(model.nbytes, seen, read, touched, mapped, spliced, s.opens or len(s.held), fraction)
    if basis and events.lost:
        basis += f"; {events.lost} event records lost"
    rchar = sum(v[1] - v[0] for v in s.rchar.values()) if s.rchar else None
    io_read = sum(v[1] - v[0] for v in s.read_bytes.values()) if s.read_bytes else None
    return ReadEvidence(
        model=model.name, model_bytes=model.nbytes, rchar=rchar, read_bytes=io_read, mapped_bytes=mapped,
        resident_before=None if s.resident_before is None else sum(s.resident_before),
        resident_after=None if resident_after is None else sum(resident_after),
        processes=max(len(s.processes), events.started), samples=s.samples, unreadable=s.unreadable,
        basis=basis, seen_bytes=seen, files=len(sizes), files_held=len(s.held), sampling_s=round(s.busy_s, 6),
        grade=grade, source="events", read_call_bytes=read, touched_bytes=touched, spliced_bytes=spliced,
        events_lost=events.lost, opens=s.opens)


def _grade(nbytes: int, seen: int, read: int, touched: int, mapped: int, spliced: int, opened: int,
           fraction: float) -> tuple[str, str]:
    """(grade, basis); the basis is '' below the credited grades."""
    if nbytes > 0 and seen >= fraction * nbytes:
        tensors = f"({size_text(nbytes)} of tensors)"
        if read and touched:
            return ("bytes-read" if read >= touched else "mapping-touched",
                    f"{size_text(seen)} of its files reached it: {size_text(read)} read by its read calls, "
                    f"{size_text(touched)} touched through its mappings {tensors}")
        if read:
            return "bytes-read", f"{size_text(read)} read by its read calls on the model's files {tensors}"
        return "mapping-touched", f"{size_text(touched)} touched through its mappings of the model's files {tensors}"
    if mapped:
        return "mapped-only", ""
    if read or touched or spliced or opened:
        return "opened-only", ""
    return "none", ""


def size_text(nbytes: int) -> str:
    """``8.00 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


__all__ = ["judge_events", "size_text"]
