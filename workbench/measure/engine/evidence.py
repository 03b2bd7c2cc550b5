"""Evidence that an external engine read the model inside its load window — the model's own bytes.

An engine the workbench times is a black box: a command that prints the marker without touching the
model would otherwise be reported at the model's size over its window (9 GB/s for ``echo loaded``), and
one that reads 8 MB of ``/dev/zero`` or another file of the model's size would pass any count of "bytes
read". So only what is attributable to the model's files — each known by (st_dev, st_ino), whatever
path reaches it (:mod:`~workbench.measure.engine.target`) — counts. While the engine runs its process
tree is sampled (:mod:`~workbench.measure.engine.sampler`), and per file of the model the window shows:

- **descriptors**: the furthest offset any descriptor of a process on the file reached past where it
  stood at the window's start (``/proc/PID/fdinfo`` ``pos:``; a descriptor that went away keeps what it
  reached last), the process's files together bounded by what its read calls returned in the window
  (``rchar`` only bounds: an engine cannot have read more through read calls than that, but ``rchar``
  counts any file, so it never proves);
- **mapped**: the most of the file's pages resident in the tree's mappings of it at one sample (their
  page-table entries, from ``pagemap``), less what was resident at the start marker;
- **page cache**: the file's pages brought into the page cache between spawn and the end marker
  (mincore).

A file counts at its best measure, once; the run has evidence when the files' sum covers
:data:`EVIDENCE_FRACTION` of the model's tensor bytes, and shows its time only (``no evidence the engine
read MODEL``, no GB/s) otherwise. So a shard seen at its fullest in one sample and another in a later
one both count (a loader that maps, reads and drops shards one by one), and a third of a set is no load
of the set. What none of these can see: a warm file read with ``pread`` or io_uring (its offset does not
move, no page is mapped or fetched), and a warm file opened, read and closed — or mapped, read and
unmapped — between two samples (under a few ms: a file of a few MiB; a shard copied out by safetensors'
numpy path) — such runs show time only, and ``--time-only`` accepts them on purpose. The rule does not
trust a descriptor that only seeks: its offset counts up to what its process's read calls returned,
so only an engine that seeks to the end of the model *and* reads as much elsewhere would pass.
"""
from __future__ import annotations

from typing import Any, Sequence

from workbench.measure.engine.target import ReadTarget
from workbench.records import ReadEvidence, RunRecord

EVIDENCE_FRACTION = 0.9  # the share of the model's bytes a measure must show


def judge(s: Any, resident_after: Sequence[int] | None) -> ReadEvidence:
    """The evidence of a sampled run (``s``: a :class:`~workbench.measure.engine.sampler.TreeSampler`)."""
    model: ReadTarget = s.model
    n = len(model.paths)
    sizes = list(model.sizes) or [model.nbytes] * n
    fd = _through_descriptors(s, n)
    mapped = [max(0, a - b) for a, b in zip(s.mapped, s.mapped_start)]
    gain = None
    if s.resident_before is not None and resident_after is not None:
        gain = [max(0, a - b) for a, b in zip(resident_after, s.resident_before)]
    per_file = [min(size, max(fd[i], mapped[i], gain[i] if gain else 0)) for i, size in enumerate(sizes)]
    totals = {"mapped": sum(min(m, z) for m, z in zip(mapped, sizes)), "fd": sum(min(f, z) for f, z in zip(fd, sizes)),
              "gain": None if gain is None else sum(min(g, z) for g, z in zip(gain, sizes))}
    seen = sum(per_file)
    rchar = sum(v[1] - v[0] for v in s.rchar.values()) if s.rchar else None
    read = sum(v[1] - v[0] for v in s.read_bytes.values()) if s.read_bytes else None
    return ReadEvidence(
        model=model.name, model_bytes=model.nbytes, rchar=rchar, read_bytes=read, mapped_bytes=totals["mapped"],
        resident_before=None if s.resident_before is None else sum(s.resident_before),
        resident_after=None if resident_after is None else sum(resident_after), processes=len(s.processes),
        samples=s.samples, unreadable=s.unreadable, basis=_basis(model.nbytes, seen, totals),
        fd_bytes=totals["fd"], seen_bytes=seen, files=n, files_held=len(s.held),
        sampling_s=round(s.busy_s, 6))


def _through_descriptors(s: Any, n: int) -> list[int]:
    """Per file: the furthest any process's descriptors on it reached in the window, each process's
    files together bounded by its ``rchar`` growth (dup'ed or inherited descriptors are counted once)."""
    reach: dict[int, list[int]] = {}
    for (pid, _, index), held in s.descriptors.items():
        row = reach.setdefault(pid, [0] * n)
        row[index] = max(row[index], held.reach - held.base)
    out = [0] * n
    for pid, row in reach.items():
        total = sum(row)
        bound = s.rchar.get(pid)
        room = 0 if bound is None else max(0, bound[1] - bound[0])
        scale = 1.0 if total <= room else room / total
        out = [max(o, int(r * scale)) for o, r in zip(out, row)]
    return out


def _basis(nbytes: int, seen: int, totals: dict[str, int | None]) -> str:
    """What shows the read ('' when nothing covers :data:`EVIDENCE_FRACTION` of ``nbytes``)."""
    need = EVIDENCE_FRACTION * nbytes
    if nbytes <= 0 or seen < need:
        return ""
    size = _size(nbytes)
    alone = {"mapped": f"{_size(totals['mapped'] or 0)} of its pages mapped ({size} of tensors)",
             "gain": f"{_size(totals['gain'] or 0)} brought into the page cache ({size} of tensors)",
             "fd": f"{_size(totals['fd'] or 0)} read through its descriptors on the model's files ({size} of tensors)"}
    for name, text in alone.items():
        if (totals[name] or 0) >= need:
            return text
    parts = ", ".join(f"{label} {_size(totals[name] or 0)}" for name, label in
                      (("mapped", "mapped"), ("fd", "descriptors"), ("gain", "page cache")) if totals[name])
    return f"{_size(seen)} of its bytes seen, each file at its best ({parts}; {size} of tensors)"


def evidence_tally(runs: Sequence[RunRecord]) -> tuple[int, int, str]:
    """(finished runs without evidence, finished runs, the model's name) of an external attempt."""
    finished = [r for r in runs if r.ok and r.report is not None and r.report.external is not None]
    lacking = [r.report.external.evidence for r in finished
               if r.report.external.evidence is None or not r.report.external.evidence.ok]
    name = next((e.model for e in lacking if e is not None), "the model")
    return len(lacking), len(finished), name


def evidence_note(runs: Sequence[RunRecord]) -> str:
    """``no evidence the engine read m.gguf in 2/5 runs: time only, no GB/s`` for an external attempt
    whose finished runs do not all show the read; '' otherwise."""
    lacking, finished, name = evidence_tally(runs)
    if not lacking:
        return ""
    return f"no evidence the engine read {name} in {lacking}/{finished} runs: time only, no GB/s"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


__all__ = ["EVIDENCE_FRACTION", "ReadTarget", "evidence_note", "evidence_tally", "judge"]
