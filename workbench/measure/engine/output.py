"""Reading an engine's output from its pseudo-terminal: lines, their arrival times, bounded memory.

An engine's log is untrusted input: it may print megabytes without a newline. The reader scans only the
bytes each read brings (never the line kept so far), keeps at most :data:`MAX_LINE` bytes of a line (its
start, where markers and phase lines are), reads while output is there and waits only when there is
none, and stamps each read's time as it returns, before looking at its bytes: the end of the measured
window is when the marker's bytes arrived, whatever came before them (issue 19: a 1 MB line used to add
seconds, a 20 MB one to time out).
"""
from __future__ import annotations

import contextlib
import os
import re
import select
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from workbench.records import EnginePhase

if TYPE_CHECKING:
    from workbench.measure.engine.command import Patterns

TAIL_LINES = 20  # an engine's last output lines kept with its run
LINE_CHARS = 300  # characters kept of each
MAX_LINE = 64 << 10  # bytes of one output line kept for the markers and phase patterns
READ_BYTES = 64 << 10  # the most one read of the terminal takes (it hands over ~4 KiB at a time)
_SEPARATOR = re.compile(rb"[\r\n]")


class LineSplitter:
    """The engine's output bytes as lines (split on ``\n`` or ``\r``), scanning only the bytes that just
    arrived — never the line kept so far, so a line of any length costs time linear in its bytes — and
    keeping at most :data:`MAX_LINE` bytes of one line (its start, where markers and phase lines are);
    how many bytes of longer lines were not kept is counted in ``cut``."""

    def __init__(self, limit: int = MAX_LINE):
        self.limit, self.line, self.cut, self.longest = limit, bytearray(), 0, 0
        self._length = 0  # of the line in progress, kept or not

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes (b"" ends the output: the line in progress, if any, completes)."""
        if chunk and b"\n" not in chunk and b"\r" not in chunk:  # the middle of a long line: count it
            self._keep(chunk)
            return []
        done, start = [], 0
        for match in _SEPARATOR.finditer(chunk):
            self._keep(chunk[start:match.start()])
            done.append(self._take())
            start = match.end()
        self._keep(chunk[start:])
        if not chunk and self._length:
            done.append(self._take())
        return done

    @property
    def pending(self) -> bool:
        """Whether a line has begun and not ended."""
        return self._length > 0

    def _keep(self, piece: bytes) -> None:
        room = self.limit - len(self.line)
        if room > 0:
            self.line += piece[:room]
        self.cut += max(0, len(piece) - max(room, 0))
        self._length += len(piece)

    def _take(self) -> bytes:
        line, self.longest = bytes(self.line), max(self.longest, self._length)
        self.line.clear()
        self._length = 0
        return line


def read_until_marker(fd: int, watch: Any, deadline: float, sampler: Any = None) -> bool:
    """Feed lines to ``watch`` (``feed(line, at) -> bool``, ``notes``, ``start_at``) until the end marker
    (True), the output ends or the deadline passes.

    Each read is timestamped as it returns, before its bytes are looked at, and looking at them costs
    time linear in the new bytes (:class:`LineSplitter`), so neither a long line nor the reader's own
    work moves the end of the measured window. ``sampler`` (``running()``, ``mark_start()``:
    :class:`~workbench.measure.engine.sampler.TreeSampler`) samples the engine's process tree on a
    thread of its own meanwhile, and at the start marker."""
    with sampler.running() if sampler is not None else contextlib.nullcontext():
        return _read_lines(fd, watch, deadline, sampler)


def _read_lines(fd: int, watch: Any, deadline: float, sampler: Any) -> bool:
    lines = LineSplitter()
    os.set_blocking(fd, False)  # read while there is output; wait in select only when there is none
    prior = None
    try:
        while True:
            try:
                chunk = os.read(fd, READ_BYTES)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return False
                continue
            except OSError:  # EIO: the terminal's last writer closed it
                chunk = b""
            at = time.monotonic()
            if at > deadline:
                return False
            for line in lines.feed(chunk):
                started = watch.start_at is not None
                if watch.feed(line, at):
                    watch.prior_at = prior
                    return True
                if not started and watch.start_at is not None:
                    watch.start_prior_at = prior
                    if sampler is not None:
                        sampler.mark_start()
            if not chunk:
                return False
            if not lines.pending:  # a read that ended mid-line holds part of the next line: not "before" it
                prior = at
    finally:
        if lines.cut:
            watch.notes.append(f"output lines longer than {MAX_LINE:,} bytes were cut to that for matching "
                               f"(longest {lines.longest:,} bytes; {lines.cut:,} bytes not kept)")


def read_after_marker(fd: int, tail: Any, grace_s: float, chars: int) -> None:
    """Read on for up to ``grace_s`` after the end marker (the engine may still print and exit on its
    own), each line's first ``chars`` characters onto ``tail``; returns when the output ends or the
    grace is over."""
    lines = LineSplitter()
    deadline = time.monotonic() + grace_s
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, READ_BYTES)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return
            continue
        except OSError:
            chunk = b""
        tail.extend(t[:chars] for t in (x.decode(errors="replace").strip() for x in lines.feed(chunk)) if t)
        if not chunk or time.monotonic() > deadline:
            return


@dataclass
class Watch:
    """What the output said up to the end marker: the start marker, phase lines, the last lines."""

    patterns: Patterns
    t0: float
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    phases: list[EnginePhase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    start_at: float | None = None
    prior_at: float | None = None  # when the read before the end marker's returned (None: it came first)
    start_prior_at: float | None = None  # likewise for the start marker
    start_line: str | None = None
    end_at: float | None = None
    end_line: str | None = None

    def feed(self, raw: bytes, at: float) -> bool:
        """Read one line that arrived at ``at``; True when it is the end marker."""
        text = raw.decode(errors="replace").strip()
        if text:
            self.tail.append(text[:LINE_CHARS])
        self._read_phases(text, at)
        if self.patterns.start is not None and self.start_at is None and self.patterns.start.search(text):
            self.start_at, self.start_line = at, text[:LINE_CHARS]
        if self.patterns.marker.search(text):
            self.end_at, self.end_line = at, text[:LINE_CHARS]
            return True
        return False

    def _read_phases(self, text: str, at: float) -> None:
        for pattern in self.patterns.phases:
            for match in pattern.finditer(text):
                groups = match.groupdict()
                name, unit = (groups.get("name") or "").strip(), "ms" if groups.get("ms") is not None else "s"
                try:
                    seconds = float(groups[unit]) / (1000.0 if unit == "ms" else 1.0)
                except (TypeError, ValueError):
                    seconds = None
                if not name or seconds is None or seconds != seconds or seconds < 0:
                    self.notes.append(f"phase line not read (name {name!r}, {unit} {groups.get(unit)!r}): "
                                      f"{text[:120]}")
                    continue
                self.phases.append(EnginePhase(name, seconds, at - self.t0, text[:LINE_CHARS]))


def sum_phases(phases: Sequence[EnginePhase]) -> dict[str, float]:
    """Seconds per phase name, a name printed several times (once per layer) summed."""
    out: dict[str, float] = {}
    for phase in phases:
        out[phase.name] = out.get(phase.name, 0.0) + phase.seconds
    return out
