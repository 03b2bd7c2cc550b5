"""The tensor index: what a model holds and exactly where, format-independent.

A *model* is a set of files — one file, a sharded safetensors checkpoint, a gguf-split set — and every
tensor names the file its bytes live in (:attr:`TensorInfo.file`, an absolute path). Offsets are
absolute within that file. Resolution (index file, directory, shard siblings, GGUF splits) happens once,
in :func:`workbench.formats.open_index`; everything above the formats layer works on
:attr:`TensorIndex.files` and never special-cases a shard.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterator

PAGE_SIZE = 4096


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's bytes: absolute ``offset`` (from byte 0 of ``file``) and ``nbytes``.

    ``file`` is the absolute path of the file holding the bytes; an index built by hand over one file
    may leave it empty, and :class:`TensorIndex` fills it with its path.
    """

    name: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    file: str = ""

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(frozen=True)
class ExpertBlob:
    """The experts of one (layer, projection) in a MoE model.

    ``slices`` are (absolute offset, nbytes) per expert, in expert order, all in ``file`` (a blob never
    spans files: the index refuses one that would). For GGUF's stacked tensors they are
    ``offset + e * stride`` inside one tensor; for safetensors' per-expert tensors they are the tensors
    themselves. ``contiguous`` means every expert starts where the previous one ended, so the whole
    blob is one byte range ``[slices[0].offset, slices[-1].end)``. ``stride`` is the distance between
    consecutive expert starts when it is constant, else 0.
    """

    layer: int
    name: str
    n_experts: int
    stride: int
    contiguous: bool
    slices: tuple[tuple[int, int], ...]
    tensors: tuple[str, ...]
    file: str = ""

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
class ModelFile:
    """One file of a model: where its tensor data lies and the stat it was indexed with.

    ``data_start``/``data_end`` bound the bytes its tensors occupy (``data_offset`` twice when it holds
    none). ``mtime_ns``/``inode`` 0 mean unknown (an index built by hand; see workbench.formats.drift).
    """

    path: str
    format: str
    size: int
    data_offset: int
    alignment: int
    n_tensors: int
    data_start: int
    data_end: int
    mtime_ns: int = field(default=0, compare=False)
    inode: int = field(default=0, compare=False)

    @property
    def data_range(self) -> tuple[int, int]:
        """(start, end) of the region holding this file's tensor data."""
        return self.data_start, self.data_end

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class TensorIndex:
    """A model's tensors, expert blobs and layout facts, over one file or a set of files.

    ``path`` is the model as resolved: the file itself, or the directory / index file / first shard of
    a set. ``size`` is the bytes of every file together; ``data_offset``, ``alignment``, ``mtime_ns``
    and ``inode`` are the first file's. ``files`` lists the files in order (filled from the other
    fields for a single-file index built by hand); ``index_file`` is the set's index
    (``model.safetensors.index.json``) when it has one; ``notes`` say what the set's layout changed
    (an expert group split across two files is not a blob).
    """

    path: str
    format: str
    size: int
    data_offset: int  # first byte of the (first file's) tensor-data region
    alignment: int  # the format's declared data alignment (GGUF general.alignment; 8 for safetensors)
    tensors: tuple[TensorInfo, ...]
    blobs: tuple[ExpertBlob, ...] = ()
    metadata: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The file as it was indexed (0: unknown, an index built by hand); see workbench.formats.drift.
    mtime_ns: int = field(default=0, compare=False)
    inode: int = field(default=0, compare=False)
    files: tuple[ModelFile, ...] = ()
    index_file: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)  # layout facts worth a line (inspect)

    def __post_init__(self) -> None:
        if not self.files:  # one file: the index's own fields describe it
            lo, hi = _span(self.tensors, self.data_offset)
            one = ModelFile(self.path, self.format, self.size, self.data_offset, self.alignment,
                            len(self.tensors), lo, hi, self.mtime_ns, self.inode)
            object.__setattr__(self, "files", (one,))
        if len(self.files) == 1:
            only = self.files[0].path
            if any(not t.file for t in self.tensors):
                object.__setattr__(self, "tensors", tuple(
                    t if t.file else dataclasses.replace(t, file=only) for t in self.tensors))
            if any(not b.file for b in self.blobs):
                object.__setattr__(self, "blobs", tuple(
                    b if b.file else dataclasses.replace(b, file=only) for b in self.blobs))

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
    def sharded(self) -> bool:
        """More than one file."""
        return len(self.files) > 1

    @property
    def data_range(self) -> tuple[int, int]:
        """(start, end) of the region holding tensor data — of the one file; a set has one per file
        (:attr:`ModelFile.data_range`), and asking the set for one is a bug worth seeing."""
        if self.sharded:
            raise ValueError(f"{self.path}: a model of {len(self.files)} files has one data range per "
                             "file (TensorIndex.files[i].data_range)")
        return self.files[0].data_range

    @property
    def page_aligned(self) -> int:
        """How many tensor offsets sit on a page boundary."""
        return sum(1 for t in self.tensors if t.offset % PAGE_SIZE == 0)

    @property
    def is_moe(self) -> bool:
        return bool(self.blobs)

    def file(self, path: str) -> ModelFile:
        """The :class:`ModelFile` at ``path`` (KeyError if the model has no such file)."""
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)

    def tensors_in(self, path: str) -> tuple[TensorInfo, ...]:
        """The tensors of file ``path``, in file order."""
        return tuple(sorted((t for t in self.tensors if t.file == path), key=lambda t: (t.offset, t.nbytes)))

    def by_file(self) -> list[tuple[ModelFile, tuple[TensorInfo, ...]]]:
        """Each file (in the model's order) with its tensors in file order."""
        groups: dict[str, list[TensorInfo]] = {f.path: [] for f in self.files}
        for t in self.tensors:
            groups[t.file].append(t)
        return [(f, tuple(sorted(groups[f.path], key=lambda t: (t.offset, t.nbytes)))) for f in self.files]

    def sorted_by_offset(self) -> tuple[TensorInfo, ...]:
        """Every tensor in read order: file by file (the model's order), by offset within a file."""
        return tuple(t for _, ts in self.by_file() for t in ts)


def _span(tensors: tuple[TensorInfo, ...], data_offset: int) -> tuple[int, int]:
    if not tensors:
        return data_offset, data_offset
    return min(t.offset for t in tensors), max(t.end for t in tensors)


@dataclass(frozen=True)
class FileIdentity:
    """Which file — or set of files — a result is about: path, size, mtime and a fast hash.

    ``path`` is the file as it was named (its logical name: a hub snapshot's entry, not the blob it
    links to) and ``read_path`` the file its bytes were read from (links resolved). For a set, ``path``
    is the model's path, ``size`` the bytes of every file, ``mtime_ns`` the newest, ``hash`` one digest
    over each member's logical name and content (``"set:xxh3_128:<hex>"``), and ``files`` the members
    (each file, then the index file if there is one).
    """

    path: str
    size: int
    mtime_ns: int
    hash: str  # "xxh3_128:<hex>", or "set:xxh3_128:<hex>" for a set
    files: tuple["FileIdentity", ...] = ()
    read_path: str = ""
