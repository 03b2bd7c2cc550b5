"""The tensor index: what a model file holds and exactly where, format-independent."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

PAGE_SIZE = 4096


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's bytes in the file: absolute ``offset`` (from byte 0 of the file) and ``nbytes``."""

    name: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(frozen=True)
class ExpertBlob:
    """The experts of one (layer, projection) in a MoE model.

    ``slices`` are (absolute offset, nbytes) per expert, in expert order. For GGUF's stacked tensors
    they are ``offset + e * stride`` inside one tensor; for safetensors' per-expert tensors they are
    the tensors themselves. ``contiguous`` means every expert starts where the previous one ended,
    so the whole blob is one byte range ``[slices[0].offset, slices[-1].end)``. ``stride`` is the
    distance between consecutive expert starts when it is constant, else 0.
    """

    layer: int
    name: str
    n_experts: int
    stride: int
    contiguous: bool
    slices: tuple[tuple[int, int], ...]
    tensors: tuple[str, ...]

    @property
    def offset(self) -> int:
        """The lowest file offset of any expert (expert 0 need not come first in the file)."""
        return min(o for o, _ in self.slices)

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.slices)

    @property
    def span(self) -> tuple[int, int]:
        """(first byte, one past the last byte) covered by the blob's experts."""
        return self.offset, max(o + n for o, n in self.slices)


@dataclass(frozen=True)
class TensorIndex:
    """A model file's tensors, expert blobs and layout facts."""

    path: str
    format: str
    size: int
    data_offset: int  # first byte of the tensor-data region
    alignment: int  # the format's declared data alignment (GGUF general.alignment; 8 for safetensors)
    tensors: tuple[TensorInfo, ...]
    blobs: tuple[ExpertBlob, ...] = ()
    metadata: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The file as it was indexed (0: unknown, an index built by hand); see workbench.formats.drift.
    mtime_ns: int = field(default=0, compare=False)
    inode: int = field(default=0, compare=False)

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def tensor(self, name: str) -> TensorInfo:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def nbytes(self) -> int:
        """Total tensor bytes (what a full load moves)."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def data_range(self) -> tuple[int, int]:
        """(start, end) of the region holding tensor data."""
        if not self.tensors:
            return self.data_offset, self.data_offset
        return min(t.offset for t in self.tensors), max(t.end for t in self.tensors)

    @property
    def page_aligned(self) -> int:
        """How many tensor offsets sit on a page boundary."""
        return sum(1 for t in self.tensors if t.offset % PAGE_SIZE == 0)

    @property
    def is_moe(self) -> bool:
        return bool(self.blobs)

    def sorted_by_offset(self) -> tuple[TensorInfo, ...]:
        return tuple(sorted(self.tensors, key=lambda t: t.offset))


@dataclass(frozen=True)
class FileIdentity:
    """Which file a result is about: path, size, mtime and a fast whole-file hash."""

    path: str
    size: int
    mtime_ns: int
    hash: str  # "xxh3_128:<hex>"
