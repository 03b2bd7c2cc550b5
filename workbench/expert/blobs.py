"""A blob as one piece: whether its experts can be uploaded as one copy, and where each tensor sits.

The first write-up's round-2 fix uploads a layer's packed experts straight out of the file mapping in
one copy — possible only when every expert starts where the previous one ended, in expert order, so
that the blob is one byte range and expert ``e`` lands where the compute kernel indexes it.
:func:`probe_contiguity` checks exactly that (and that the blob's tensors tile the range), saying why
not when it is not. :func:`pack_blob` gives the device layout either way: the blob's tensors packed in
expert order, which for a contiguous blob is the file's own layout shifted to offset 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from workbench.formats.index import ExpertBlob, TensorIndex, TensorInfo


@dataclass(frozen=True)
class PackedBlob:
    """One blob's device buffer: ``nbytes`` and each tensor's offset in it (expert order)."""

    blob: ExpertBlob
    members: tuple[tuple[TensorInfo, int], ...]
    nbytes: int
    contiguous: bool  # the file holds the buffer's bytes as one range starting at ``blob.offset``
    reason: str = ""  # why not, when not


def probe_contiguity(blob: ExpertBlob, tensors: Mapping[str, TensorInfo]) -> str:
    """'' when the blob is one file range in expert order that its tensors tile; else the first reason."""
    for e in range(1, len(blob.slices)):
        (prev, n), (cur, _) = blob.slices[e - 1], blob.slices[e]
        if cur != prev + n:
            where = "before" if cur < prev + n else f"{cur - prev - n:,} B after"
            return f"expert {e} starts {where} expert {e - 1} ends"
    first, end = blob.span
    at = first
    for name in blob.tensors:
        t = tensors[name]
        if t.offset != at:
            return f"tensor {name} is not where the previous one ended"
        at = t.end
    if at != end:
        return f"the blob's tensors cover {at - first:,} of its {end - first:,} B"
    return ""


def pack_blob(blob: ExpertBlob, tensors: Mapping[str, TensorInfo]) -> PackedBlob:
    """The blob's device layout: its tensors back to back in expert order, and whether that is the file's."""
    reason = probe_contiguity(blob, tensors)
    members, at = [], 0
    for name in blob.tensors:
        members.append((tensors[name], at))
        at += tensors[name].nbytes
    return PackedBlob(blob, tuple(members), at, not reason, reason)


def pack_blobs(index: TensorIndex) -> tuple[list[PackedBlob], tuple[TensorInfo, ...]]:
    """Every blob of ``index`` packed, and the dense tensors (those in no blob), in file order."""
    by_name = {t.name: t for t in index.tensors}
    packed = [pack_blob(b, by_name) for b in index.blobs]
    in_blobs = {name for b in index.blobs for name in b.tensors}
    dense = tuple(t for t in index.sorted_by_offset() if t.name not in in_blobs)
    return packed, dense
