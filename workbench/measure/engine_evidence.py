"""Evidence that an external engine read the model inside its load window.

An engine the workbench times is a black box: a command that prints the marker without touching the
model would otherwise be reported at the model's size over its window (9 GB/s for ``echo loaded``).
So while it runs, its process tree is sampled from ``/proc``:

- ``/proc/PID/io`` of every process in the tree (``rchar``: bytes its read calls returned, from any
  file; ``read_bytes``: bytes it made the kernel fetch from storage, page faults on a mapping
  included). A child's counters reach its parent's only when the parent reaps it, so the tree is
  walked on every sample (``/proc/PID/task/TID/children``) and the largest total seen is kept;
- ``/proc/PID/maps`` and ``smaps``: the resident size of the tree's mappings of the model's files
  (an engine that maps the model reads it without a read call, and with a warm page cache without
  any storage read either);
- the model's page-cache residency (mincore) at spawn and at the marker.

A run has evidence when one of them covers at least :data:`EVIDENCE_FRACTION` of the model's bytes;
otherwise it says ``no evidence the engine read MODEL`` and shows its time only. What none of these
can see: an engine that reads a warm model through io_uring (no read call, no storage read, no
mapping) — its runs show time only.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Sequence

from workbench.records import ReadEvidence, RunRecord

EVIDENCE_FRACTION = 0.9  # the share of the model's bytes a measure must show
SAMPLE_S = 0.1  # how often the tree is sampled while the engine runs
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ [0-9a-f]+ ([0-9a-f]+:[0-9a-f]+) (\d+)\s*(.*)$")


@dataclass(frozen=True)
class ReadTarget:
    """What an engine is said to load: the model's data files, their (device, inode), its tensor bytes."""

    name: str
    paths: tuple[str, ...]
    nbytes: int
    ids: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def of(cls, path: str, nbytes: int | None = None) -> ReadTarget:
        """The model at ``path`` (a file, or a set's directory, index file or shard: every data file of
        it; a file the workbench cannot index: that file). ``nbytes`` defaults to its tensor bytes."""
        from workbench.io.modelcache import model_files

        files = model_files(path, any_file=True)
        paths = tuple(os.path.realpath(p) for p in files.paths[:files.n_data_files])
        if nbytes is None:
            nbytes = files.index.nbytes if files.index is not None else files.data_bytes
        ids = set()
        for p in paths:
            try:
                st = os.stat(p)
            except OSError:
                continue
            ids.add((f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino))
        return cls(os.path.basename(os.fspath(path).rstrip("/")) or os.fspath(path), paths, nbytes, frozenset(ids))

    def resident_bytes(self) -> int | None:
        """Bytes of the model in the page cache now (None when mincore cannot tell)."""
        from workbench.errors import WorkbenchError
        from workbench.io.pagecache import page_size, resident_pages

        total = 0
        try:
            for p in self.paths:
                total += resident_pages(p)[0] * page_size()
        except (OSError, WorkbenchError):
            return None
        return total


@dataclass
class TreeSampler:
    """Samples an engine's process tree while it runs; :meth:`evidence` judges what it saw."""

    root: int
    model: ReadTarget
    resident_before: int | None = None
    samples: int = 0
    processes: set[int] = field(default_factory=set)
    unreadable: str = ""
    io_total: tuple[int, int] | None = None  # the largest (rchar, read_bytes) sums seen
    io_start: tuple[int, int] = (0, 0)  # at the start marker (spawn: nothing read yet)
    mapped: int = 0  # the most model bytes mapped at once
    mapped_start: int = 0
    last: float = 0.0
    final: ReadEvidence | None = None

    def due(self, now: float) -> bool:
        return self.final is None and now - self.last >= SAMPLE_S

    def sample(self) -> None:
        """Read every process of the tree once (cheap: a few small /proc files per process)."""
        if self.final is not None:
            return
        self.last = time.perf_counter()
        self.samples += 1
        rchar = read_bytes = mapped = 0
        seen_io = False
        for pid in tree_of(self.root):
            self.processes.add(pid)
            counters = _io(pid)
            if counters is None:
                self.unreadable = self.unreadable or f"/proc/{pid}/io unreadable"
            else:
                seen_io = True
                rchar, read_bytes = rchar + counters[0], read_bytes + counters[1]
            mapped += _mapped(pid, self.model)
        if seen_io:
            best = self.io_total or (0, 0)
            self.io_total = (max(best[0], rchar), max(best[1], read_bytes))
        self.mapped = max(self.mapped, mapped)

    def mark_start(self) -> None:
        """The start marker: what was read before it is not the window's."""
        self.sample()
        self.io_start, self.mapped_start = self.io_total or (0, 0), self.mapped

    def finish(self) -> ReadEvidence:
        """The last sample, at the end marker, and the model's residency then; judged once."""
        if self.final is None:
            self.sample()
            self.final = judge(self, self.model.resident_bytes())
        return self.final


def judge(s: TreeSampler, resident_after: int | None) -> ReadEvidence:
    """The evidence of a sampled run: which measure, if any, covers the model's bytes."""
    need = EVIDENCE_FRACTION * s.model.nbytes
    rchar = read = None
    if s.io_total is not None:
        rchar, read = s.io_total[0] - s.io_start[0], s.io_total[1] - s.io_start[1]
    mapped = max(0, s.mapped - s.mapped_start)
    gain = None if s.resident_before is None or resident_after is None else resident_after - s.resident_before
    size = _size(s.model.nbytes)
    checks = [  # file-specific measures first
        (mapped, f"{_size(mapped)} of its pages mapped ({size} of tensors)"),
        (gain, f"{_size(gain or 0)} brought into the page cache ({size} of tensors)"),
        (read, f"its processes fetched {_size(read or 0)} from storage ({size} of tensors)"),
        (rchar, f"its processes' read calls returned {_size(rchar or 0)} ({size} of tensors)"),
    ]
    basis = next((text for value, text in checks if value is not None and s.model.nbytes > 0 and value >= need), "")
    return ReadEvidence(
        model=s.model.name, model_bytes=s.model.nbytes, rchar=rchar, read_bytes=read, mapped_bytes=mapped,
        resident_before=s.resident_before, resident_after=resident_after, processes=len(s.processes),
        samples=s.samples, unreadable=s.unreadable, basis=basis)


def tree_of(root: int) -> list[int]:
    """``root`` and every live descendant (through /proc/PID/task/TID/children; else by session)."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return _session_members(root)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
            except (OSError, ValueError):
                continue
    return out


def _session_members(sid: int) -> list[int]:
    """Every process of session ``sid`` (the engine leads its own session): the slower fallback."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            members.append(int(name))
    return members


def _io(pid: int) -> tuple[int, int] | None:
    """(rchar, read_bytes) of a process (its reaped children included); (0, 0) when it is gone (what it
    read is its parent's once reaped); None when it may not be read (another user's, a setuid program)."""
    try:
        with open(f"/proc/{pid}/io") as fh:
            values = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
        return int(values["rchar"]), int(values["read_bytes"])
    except (FileNotFoundError, ProcessLookupError):
        return 0, 0
    except (OSError, KeyError, ValueError):
        return None


def _mapped(pid: int, model: ReadTarget) -> int:
    """Resident bytes of ``pid``'s mappings of the model's files (0 when it maps none)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            maps = fh.read()
    except OSError:
        return 0
    if not any(p in maps for p in model.paths) and not any(f" {ino} " in maps for _, ino in model.ids):
        return 0  # the common case, cheaply: no mapping of the model at all
    total, inside = 0, False
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                m = _MAPPING.match(line)
                if m:
                    dev, ino, path = m.group(1), int(m.group(2)), m.group(3).strip()
                    inside = (dev, ino) in model.ids or path in model.paths
                elif inside and line.startswith("Rss:"):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return total
    return total


def evidence_note(runs: Sequence[RunRecord]) -> str:
    """``no evidence the engine read m.gguf in 2/5 runs: time only, no GB/s`` for an external attempt
    whose finished runs do not all show the read; '' otherwise."""
    finished = [r for r in runs if r.ok and r.report.external is not None]
    lacking = [r.report.external.evidence for r in finished
               if r.report.external.evidence is None or not r.report.external.evidence.ok]
    if not lacking:
        return ""
    name = next((e.model for e in lacking if e is not None), "the model")
    return f"no evidence the engine read {name} in {len(lacking)}/{len(finished)} runs: time only, no GB/s"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


__all__ = ["EVIDENCE_FRACTION", "ReadTarget", "TreeSampler", "evidence_note", "judge", "tree_of"]
