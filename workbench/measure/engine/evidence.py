"""Evidence that an external engine read the model inside its load window — the model's own bytes.

Where the kernel can record the window's events (:mod:`workbench.io.fileevents`; Linux 6.11+, root),
:mod:`~workbench.measure.engine.grade` grades the run from that record, and nothing here is used. This
module is the fallback where it cannot (another kernel, no privileges): the evidence is then sampled, as
below, and graded by what samples can show — ``bytes-read`` through descriptors; a mapping's resident pages
cannot tell a touched mapping from a populated one, so a mapping is at most ``mapped-only``; a page-cache
gain alone (``readahead``/``fadvise`` make one without reading) is at most ``opened-only``.

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

Only descriptors credit a sampled run (``bytes-read``, when they cover :data:`EVIDENCE_FRACTION` of
the model's tensor bytes); the mapped and page-cache figures are shown, never credited. What samples
cannot see: a warm file read with ``pread`` or io_uring (its offset does not move), a file opened, read
and closed between two samples, and any touch of a mapping — such runs show time only, and
``--time-only`` accepts them on purpose. A descriptor that only seeks counts up to what its process's
read calls returned.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from workbench.measure.engine.grade import size_text as _size
from workbench.measure.engine.target import ReadTarget
from workbench.records import ReadEvidence, RunRecord

EVIDENCE_FRACTION = 0.9  # the share of the model's bytes a measure must show


def judge(s: Any, resident_after: Sequence[int] | None, why: str = "") -> ReadEvidence:
    """The evidence of a sampled run (``s``: a :class:`~workbench.measure.engine.sampler.TreeSampler`;
    ``why``: why no event record was made)."""
    model: ReadTarget = s.model
    n = len(model.paths)
    sizes = list(model.sizes) or [model.nbytes] * n
    fd = _through_descriptors(s, n)
    mapped = [max(0, a - b) for a, b in zip(s.mapped, s.mapped_start)]
    gain = None
    if s.resident_before is not None and resident_after is not None:
        gain = [max(0, a - b) for a, b in zip(resident_after, s.resident_before)]
    totals = {"mapped": sum(min(m, z) for m, z in zip(mapped, sizes)), "fd": sum(min(f, z) for f, z in zip(fd, sizes)),
              "gain": None if gain is None else sum(min(g, z) for g, z in zip(gain, sizes))}
    seen = totals["fd"] or 0  # only descriptors show bytes that reached the engine (see the module doc)
    basis = _basis(model.nbytes, seen, totals)
    grade = "bytes-read" if basis else "mapped-only" if totals["mapped"] or any(s.mapped) else \
        "opened-only" if s.held or s.opens or totals["gain"] else "none"
    rchar = sum(v[1] - v[0] for v in s.rchar.values()) if s.rchar else None
    read = sum(v[1] - v[0] for v in s.read_bytes.values()) if s.read_bytes else None
    return ReadEvidence(
        model=model.name, model_bytes=model.nbytes, rchar=rchar, read_bytes=read, mapped_bytes=totals["mapped"],
        resident_before=None if s.resident_before is None else sum(s.resident_before),
        resident_after=None if resident_after is None else sum(resident_after), processes=len(s.processes),
        samples=s.samples, unreadable=s.unreadable, basis=basis, fd_bytes=totals["fd"], seen_bytes=seen, files=n,
        files_held=len(s.held), sampling_s=round(s.busy_s, 6), grade=grade, source=f"samples: {why}",
        opens=s.opens)


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
    return (f"{_size(totals['fd'] or 0)} read through its descriptors on the model's files "
            f"({_size(nbytes)} of tensors; sampled)")


def evidence_tally(runs: Sequence[RunRecord]) -> tuple[int, int, str]:
    """(finished runs without evidence, finished runs, the model's name) of an external attempt."""
    finished = [r for r in runs if r.ok and r.report is not None and r.report.external is not None]
    lacking = [r.report.external.evidence for r in finished
               if r.report.external.evidence is None or not r.report.external.evidence.ok]
    name = next((e.model for e in lacking if e is not None), "the model")
    return len(lacking), len(finished), name


def evidence_note(runs: Sequence[RunRecord]) -> str:
    """The grades of an external attempt's finished runs: ``evidence: bytes-read 5/5`` when every one is
    credited, else ``no evidence the engine read m.gguf in 2/5 runs (mapped-only 2/5, bytes-read 3/5): time
    only, no GB/s``; '' for an attempt with no finished external run."""
    lacking, finished, name = evidence_tally(runs)
    if not finished:
        return ""
    grades = Counter(_level(r) for r in runs if r.ok and r.report is not None and r.report.external is not None)
    shown = ", ".join(f"{g} {k}/{finished}" for g, k in grades.most_common())
    if not lacking:
        return f"evidence: {shown}"
    return f"no evidence the engine read {name} in {lacking}/{finished} runs ({shown}): time only, no GB/s"


def _level(run: RunRecord) -> str:
    evidence = run.report.external.evidence if run.report is not None and run.report.external is not None else None
    return "none" if evidence is None else evidence.level


__all__ = ["EVIDENCE_FRACTION", "ReadTarget", "evidence_note", "evidence_tally", "judge"]
