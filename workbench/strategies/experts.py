"""``experts``: MoE loads with each layer's packed experts in one device buffer per blob — by default
(``upload=staged``) through the dense path's pinned staging pipeline (experts_staged.py: ``ring``'s
readers over the blobs' own buffers); with ``upload=pageable|registered|pinned`` the first write-up's
round-2 fix — each blob uploaded as one piece straight out of the file mapping, no heap staging, where
that is safe and fast — described below. Every mode carves its buffers from one device allocation.

Per expert blob: a contiguity probe over its expert slices (one file range in expert order, which
the device buffer then mirrors), and the blob's residency read from ONE mincore pass over the data
region per load (memoized: the seed probed the whole file once per layer, ~17 s of residency checks
per load; the probe count is the ``residency_probes`` counter). Contiguous and resident >= ``gate``:
one borrowed slice of the mapping, uploaded as one copy into the blob's device buffer. Otherwise the
blob goes to the lane-parallel reader (:func:`~workbench.strategies.lanes.run_lanes`, which evicts
only when the policy says so): a borrowed-slice copy from a cold mapping soft-faults serially off the
disk (~0.25 GB/s in the seed), slower than parallel preads. Dense tensors go the ordinary path: the
same gate per tensor, no grouping. Under the eviction policy (a UMA device) the mapping is dropped and
everything goes through the lanes.

``upload``: ``staged`` (the default: no borrowed slices, no lanes — see experts_staged.py; on the host
backends straight into the buffers, no staging hop),
``pageable`` (plain copies), ``registered`` (the borrowed ranges are page-locked — cudaHostRegister,
mlock on host — in as few pieces as the zero-copy blobs allow, and copied asynchronously; the lanes
stay pageable), ``pinned`` (the lanes read into pinned staging with asynchronous copies; borrowed
slices stay pageable copies).

Measured on the H200 (2026-12-01, 2 GiB A3B-like GGUF, warm, n=6): the borrowed path moved 6.0 GB/s
with pageable copies and 13.2 registered, where ``ring`` moved 21.9 on the same file — hence the
staged default.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from workbench.expert.blobs import PackedBlob, pack_blobs
from workbench.formats.index import PAGE_SIZE, TensorInfo
from workbench.io.pagecache import resident_map
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param
from workbench.strategies.experts_staged import upload_staged
from workbench.strategies.lanes import Job, cut_jobs, run_lanes
from workbench.strategies.toolkit import UPLOADS, MiB, check_upload, eviction_reason, files_note, open_mapping
from workbench.upload.base import DeviceBuffer
from workbench.upload.staging import MAPPINGS, PROVISIONS, SOURCES

DIRECT = ("auto", "off")

EXPERTS_UPLOADS = ("staged", *UPLOADS)


@dataclass(frozen=True)
class ExpertsParams(BaseParams):
    """``upload``: staged | pageable | registered | pinned. ``gate``: resident fraction that counts as
    warm (staged: for the whole model, sampled, picking the plan; otherwise per blob: the borrowed
    slice's gate; 0: always). Staged: ``readers`` and ``slot_mib`` windows warm, ``cold_readers`` and
    ``cold_mib`` reads cold, ``spare`` slots, ``staging`` source (auto | anon | alloc | wc), ``provision``
    (upfront | background | readers | first-read) and ``mapping`` (each | one) as ``ring``'s, ``sized``: the
    ring no larger than the load needs (0: readers + spare slots of ``slot_mib`` whatever the model, for
    comparison); ``direct``: ``auto``
    reads straight into the device's memory where it is host memory (no staging hop; warm readers and
    windows fitted to the load and the usable cores), ``off`` always stages. The other modes: ``threads``
    and ``chunk_mib``, the lanes for what is not borrowed."""

    small_pieces: ClassVar[Mapping[str, Any]] = MappingProxyType(
        {"chunk_mib": 1, "threads": 2, "slot_mib": 1, "cold_mib": 1, "readers": 3, "cold_readers": 2})
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (  # each upload mode; staged warm (gate 0), wc, background
        MappingProxyType({"upload": "pageable", "gate": 0.0}),
        MappingProxyType({"upload": "registered", "chunk_mib": 1, "threads": 2}),
        MappingProxyType({"upload": "pinned", "chunk_mib": 1, "threads": 2}),
        MappingProxyType({**small_pieces, "gate": 0.0}),  # straight into host memory on the host backends
        MappingProxyType({**small_pieces, "gate": 0.0, "direct": "off"}),  # staged wherever it runs
        MappingProxyType({**small_pieces, "staging": "wc", "direct": "off"}),
        MappingProxyType({**small_pieces, "provision": "background", "staging": "wc", "direct": "off"}),
        MappingProxyType({**small_pieces, "provision": "first-read", "direct": "off"}),
        MappingProxyType({**small_pieces, "provision": "first-read", "mapping": "each", "direct": "off"}))

    gate: float = 0.9
    threads: int = 4
    chunk_mib: int = 16
    upload: str = "staged"
    readers: int = 16
    cold_readers: int = 8
    slot_mib: int = 8
    cold_mib: int = 16
    spare: int = 4
    staging: str = "auto"
    # first-read: on the H200 (2026-12-03 13:58, the 2 GiB MoE GGUF, warm, n=6 interleaved, verified)
    # 92.7 ms against 120.4 upfront (1.30x; upfront 0.80x [0.63-0.99] of the ring): the upfront ring's
    # 37 ms of staging inside the window.
    provision: str = "first-read"
    # mapping=one as ring's (H200, 2026-12-03 18:42: ring on this MoE GGUF 1.02x [0.94-1.04], n=6); experts'
    # own one-vs-each A/B not run (its slots are made the same way)
    mapping: str = "one"
    sized: bool = True
    direct: str = "auto"

    def __post_init__(self) -> None:
        check_param("experts", "gate", 0.0 <= self.gate <= 1.0, f"must be in [0, 1], got {self.gate}")
        for name in ("threads", "chunk_mib", "readers", "cold_readers", "slot_mib", "cold_mib"):
            value = getattr(self, name)
            check_param("experts", name, value >= 1, f"must be >= 1, got {value}")
        check_param("experts", "spare", self.spare >= 0, f"must be >= 0, got {self.spare}")
        check_upload("experts", self.upload, EXPERTS_UPLOADS)
        check_param("experts", "staging", self.staging in SOURCES, f"one of {', '.join(SOURCES)}, got {self.staging!r}")
        check_param("experts", "provision", self.provision in PROVISIONS,
                    f"one of {', '.join(PROVISIONS)}, got {self.provision!r}")
        check_param("experts", "mapping", self.mapping in MAPPINGS,
                    f"one of {', '.join(MAPPINGS)}, got {self.mapping!r}")
        check_param("experts", "direct", self.direct in DIRECT, f"one of {', '.join(DIRECT)}, got {self.direct!r}")


class ResidencyMap:
    """Page residency of every file's data region from one mincore pass per load (a pass per file);
    fractions of any range read from it."""

    def __init__(self, ctx: LoadContext):
        self.maps: dict[str, tuple[int, np.ndarray]] = {}
        with ctx.phase("prefetch"):
            for f, tensors in ctx.by_file():
                if tensors:
                    start, end = f.data_range
                    self.maps[f.path] = (start // PAGE_SIZE, resident_map(f.path, start, end - start))
        ctx.count("residency_probes")

    def fraction(self, file: str, offset: int, nbytes: int) -> float:
        if nbytes <= 0:
            return 1.0
        first_page, pages = self.maps[file]
        lo = offset // PAGE_SIZE - first_page
        hi = -(-(offset + nbytes) // PAGE_SIZE) - first_page
        return float(np.count_nonzero(pages[lo:hi])) / (hi - lo)


@dataclass(frozen=True)
class _Item:
    """One upload unit: a packed blob or a dense tensor, and whether it goes zero-copy (and why not)."""

    members: tuple[tuple[TensorInfo, int], ...]
    nbytes: int
    offset: int  # offset of the first byte in ``file`` (meaningful when the unit is one range)
    file: str
    blob: PackedBlob | None
    zero_copy: bool
    why_not: str = ""  # "not contiguous", "below gate", or the eviction reason


def _plan(ctx: LoadContext, gate: float, borrow: bool = True) -> list[_Item]:
    """Every blob and dense tensor in model order; with ``borrow``, whether each goes zero-copy (one
    mincore pass for the gate), else none does (the staged upload reads them all)."""
    packed, dense = pack_blobs(ctx.index)
    ctx.count("contiguity_probes", len(packed))
    off = f"{eviction_reason(ctx)}: mapping dropped" if ctx.evict else "" if borrow else "staged"
    residency = None if off or not (packed or dense) else ResidencyMap(ctx)
    items = []
    order = {f.path: k for k, f in enumerate(ctx.files)}
    units = [(p.members, p.nbytes, p.blob.offset, p.members[0][0].file, p, p.contiguous) for p in packed]
    units += [(((t, 0),), t.nbytes, t.offset, t.file, None, True) for t in dense]
    for members, nbytes, offset, file, blob, contiguous in sorted(units, key=lambda u: (order[u[3]], u[2])):
        why = off or ("" if contiguous else "not contiguous")
        if not why and residency is not None and residency.fraction(file, offset, nbytes) < gate:
            why = "below gate"
        items.append(_Item(members, nbytes, offset, file, blob, not why, why))
    return items


class ExpertsStrategy(Strategy):
    name: ClassVar[str] = "experts"
    summary: ClassVar[str] = ("one device buffer per expert blob (all from one allocation); upload=staged (default): "
                              "ring's readers through pinned staging slots; pageable|registered|pinned: contiguous and "
                              "resident >= gate (one mincore pass) → one borrowed-slice copy from the mapping, else "
                              "lane-parallel pread")
    Params: ClassVar[type] = ExpertsParams

    def _load(self, ctx: LoadContext) -> None:
        p = self.params
        items = _plan(ctx, p.gate, borrow=p.upload != "staged")
        bufs = ctx.place_groups([(it.members, it.nbytes) for it in items])
        if p.upload == "staged":
            upload_staged(ctx, items, bufs, p)
            return
        _report(ctx, items, p)
        borrowed = [i for i, it in enumerate(items) if it.zero_copy]
        if borrowed:
            _upload_borrowed(ctx, [items[i] for i in borrowed], [bufs[i] for i in borrowed], p.upload)
        jobs = [job for i, it in enumerate(items) if not it.zero_copy for job in _jobs(i, it, p.chunk_mib * MiB)]
        if jobs:
            run_lanes(ctx, jobs, bufs, p.threads, p.chunk_mib, "pinned" if p.upload == "pinned" else "pageable")


def _jobs(target: int, item: _Item, chunk: int) -> list[Job]:
    return [job for t, at in item.members for job in cut_jobs(target, at, t.offset, t.nbytes, chunk, t.file)]


def _upload_borrowed(ctx: LoadContext, items: Sequence[_Item], bufs: Sequence[DeviceBuffer], upload: str) -> None:
    """One copy per item straight out of its file's mapping (page-locked first with ``upload=registered``)."""
    locked = _register(ctx, items) if upload == "registered" else set()
    for k, (item, buf) in enumerate(zip(items, bufs)):
        with ctx.phase("upload"), open_mapping(ctx, item.file).slice(item.offset, item.nbytes) as src:
            ctx.device.copy_h2d(buf, 0, src, asynchronous=k in locked)
            ctx.count("bytes", item.nbytes)
            ctx.count("zero_copy_bytes", item.nbytes)
    ctx.set_path(readers=0, copy_from="registered" if locked else "mmap")


def _register(ctx: LoadContext, items: Sequence[_Item]) -> set[int]:
    """Page-lock the borrowed ranges, adjacent ones of a file merged into one registration; the items
    covered."""
    runs: list[tuple[str, int, int, list[int]]] = []  # (file, lo, hi, items): page-rounded file ranges
    for k, it in enumerate(items):
        size = len(open_mapping(ctx, it.file).view)
        lo = it.offset - it.offset % PAGE_SIZE
        hi = min(size, -(-(it.offset + it.nbytes) // PAGE_SIZE) * PAGE_SIZE)
        if runs and runs[-1][0] == it.file and lo <= runs[-1][2]:
            runs[-1] = (it.file, runs[-1][1], max(hi, runs[-1][2]), runs[-1][3] + [k])
        else:
            runs.append((it.file, lo, hi, [k]))
    locked: set[int] = set()
    with ctx.phase("prefetch"):  # registering faults in and pins every page of the range
        for file, lo, hi, covered in runs:
            with open_mapping(ctx, file).slice(lo, hi - lo) as view:
                handle = ctx.device.register_host(view)
            if handle is not None:
                ctx.cleanup(ctx.device.unregister_host, handle)  # after the template's synchronize, before unmap
                locked.update(covered)
    done = sum(1 for *_, covered in runs if covered[0] in locked)
    ctx.engage("registered_mapping", done, len(runs), unit="ranges",
               note="" if done == len(runs) else "register_host refused (RLIMIT_MEMLOCK?): pageable copies")
    return locked


def _report(ctx: LoadContext, items: Sequence[_Item], p: ExpertsParams) -> None:
    blobs = [it for it in items if it.blob is not None]
    dense = [it for it in items if it.blob is None]
    ctx.engage("blob_zero_copy", sum(it.zero_copy for it in blobs), len(blobs), unit="blobs",
               note=_why(blobs, p.gate) if blobs else "no expert blobs: not a MoE model")
    ctx.engage("dense_zero_copy", sum(it.zero_copy for it in dense), len(dense),
               note=(_why(dense, p.gate) + files_note(ctx)).lstrip(", "))
    first = next((it.blob for it in blobs if it.why_not == "not contiguous"), None)
    if first is not None:
        ctx.note(f"not contiguous: layer {first.blob.layer} {first.blob.name}: {first.reason}")
    if p.upload == "pinned" and any(it.zero_copy for it in items):
        ctx.note("upload=pinned: the lanes stage through pinned buffers; borrowed slices are pageable copies")
    if p.upload == "registered" and any(not it.zero_copy for it in items):
        ctx.note("upload=registered: the lanes' heap staging is copied pageable")
    ctx.note(f"evict={'on' if ctx.evict else 'off'} ({ctx.evict_source}); gate {p.gate:.0%}")


def _why(items: Sequence[_Item], gate: float) -> str:
    """``2 not contiguous, 1 below gate 90%`` — how many items missed the borrowed slice, and why."""
    counts: dict[str, int] = {}
    for it in items:
        if not it.zero_copy:
            counts[it.why_not] = counts.get(it.why_not, 0) + 1
    if any(why.startswith("eviction") for why in counts):
        return next(iter(counts))  # the policy stood every item down: one reason, no count
    return ", ".join(f"{n} {why}" + (f" {gate:.0%}" if why == "below gate" else "") for why, n in counts.items())
