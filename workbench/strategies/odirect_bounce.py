"""The O_DIRECT side of ``odirect`` that both modes share: one O_DIRECT descriptor per model file, and
the bounce lane.

:func:`open_direct_files` opens each file that holds tensors once with O_DIRECT and probes it with one
aligned read through that descriptor (some file systems accept the open, then refuse the reads); a file
where either is refused is read with buffered pread instead, and says why. Each file keeps its own
logical block size, so the aligned window of a tensor is computed against its own file's block.

:class:`BounceLane` is one bounce buffer and the read → shift → upload of tensor pieces through it: the
enclosing block-aligned window is read, the payload moved to the buffer's start (the shift copy,
counted in ``shift_copy_bytes``, ``expert_shift_copy_bytes`` for the expert blobs' share), uploaded.
"""
from __future__ import annotations

import ctypes
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from workbench.errors import FormatError
from workbench.formats.drift import check_unchanged
from workbench.formats.index import ModelFile, TensorInfo
from workbench.io import direct
from workbench.records import Engaged, MiB
from workbench.strategies.base import LoadContext
from workbench.upload.base import DeviceBuffer

FEATURE = "odirect-zero-copy"


@dataclass(frozen=True)
class DirectFile:
    """One model file as O_DIRECT sees it: its descriptor and block size, or why O_DIRECT was refused."""

    file: ModelFile
    fd: int | None  # None: refused, the file is read buffered
    block: int = 0
    why: str = ""


class DirectFiles:
    """The load's O_DIRECT descriptors, one per file that holds tensors (closed when the load ends)."""

    def __init__(self, entries: Iterable[DirectFile], n_files: int):
        self.entries = tuple(entries)
        self.n_files = n_files
        self._by_path = {e.file.path: e for e in self.entries}

    def of(self, path: str) -> DirectFile:
        return self._by_path[path]

    def direct(self, path: str) -> bool:
        """Whether ``path`` is read with O_DIRECT."""
        return self._by_path[path].fd is not None

    @property
    def blocks(self) -> tuple[int, ...]:
        """The distinct block sizes of the files read with O_DIRECT."""
        return tuple(sorted({e.block for e in self.entries if e.fd is not None}))

    def split(self, tensors: Sequence[TensorInfo]) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
        """(tensors of files read with O_DIRECT, tensors of files read buffered), order kept."""
        return (tuple(t for t in tensors if self.direct(t.file)),
                tuple(t for t in tensors if not self.direct(t.file)))

    def refused(self) -> str:
        """Why O_DIRECT was refused, grouped by reason (``EINVAL on tmpfs (…) for 2/3 files: a, b`` for
        a set, the reason alone for one file); "" when it was not."""
        groups: dict[str, list[str]] = defaultdict(list)
        for e in self.entries:
            if e.fd is None:
                groups[e.why].append(e.file.name)
        if self.n_files == 1:
            return "; ".join(groups)
        return "; ".join(f"{why} for {len(names)}/{self.n_files} files: {', '.join(names[:3])}"
                         f"{' …' if len(names) > 3 else ''}" for why, names in groups.items())


def open_direct_files(ctx: LoadContext) -> DirectFiles:
    """One O_DIRECT descriptor per file that holds tensors, each probed with a first aligned read."""
    return DirectFiles((_open_one(ctx, f) for f, tensors in ctx.by_file() if tensors), len(ctx.files))


def _open_one(ctx: LoadContext, f: ModelFile) -> DirectFile:
    try:
        fd = direct.open_direct(f.path)
    except OSError as exc:
        return DirectFile(f, None, why=direct.refusal_reason(exc, f.path))
    ctx.cleanup(os.close, fd)
    check_unchanged(f, fd)
    works = direct.direct_read_works(fd, f.path)
    if not works:
        return DirectFile(f, None, why=works.reason)
    return DirectFile(f, fd, direct.logical_block_size(f.path))


def expert_tensors(ctx: LoadContext) -> set[str]:
    """Names of the tensors holding expert blobs (their shift copies are counted apart)."""
    return {name for blob in ctx.index.blobs for name in blob.tensors}


class BounceLane:
    """One bounce buffer and the read → shift → upload of tensor pieces through it, each piece from its
    own file's O_DIRECT descriptor at that file's block alignment."""

    def __init__(self, ctx: LoadContext, files: DirectFiles, nbytes: int):
        self.ctx, self.files = ctx, files
        block = max(files.blocks, default=direct.DEFAULT_ALIGNMENT)
        self.bounce = direct.AlignedBuffer(nbytes + block, max(block, direct.DEFAULT_ALIGNMENT))
        ctx.cleanup(self.bounce.close)
        self.payload_max = nbytes  # shift < block, so shift + payload always fits

    def read(self, f: DirectFile, offset: int, nbytes: int, expert: bool = False) -> memoryview:
        """The payload at the start of the bounce buffer (shift-copied when the window started early)."""
        start, length, shift = direct.aligned_window(offset, nbytes, f.block)
        got = direct.read_direct(f.fd, self.bounce.view, start, length)
        if got < shift + nbytes:  # read_direct stops short only at end of file
            raise FormatError(f.file.path, "size", f"O_DIRECT read of {length} B at {start} returned "
                                                   f"{got}: end of file, truncated since it was indexed?")
        if shift:
            ctypes.memmove(self.bounce.address, self.bounce.address + shift, nbytes)
            self.ctx.count("shift_copy_bytes", nbytes)
            self.ctx.count("shifted_pieces")
            if expert:
                self.ctx.count("expert_shift_copy_bytes", nbytes)
        return self.bounce.view[:nbytes]

    def load(self, t: TensorInfo, buf: DeviceBuffer, at: int = 0, expert: bool = False) -> None:
        """Tensor ``t`` into ``buf`` at ``at``, through the bounce buffer in pieces."""
        f = self.files.of(t.file)
        for dst in range(0, t.nbytes, self.payload_max):
            n = min(self.payload_max, t.nbytes - dst)
            with self.read(f, t.offset + dst, n, expert) as payload:
                self.ctx.upload(buf, at + dst, payload)


def zero_copy_fact(placed: int, total: int, reasons: Sequence[str], counters: dict[str, int]) -> Engaged:
    """``odirect-zero-copy: n/m layer buffers placed — STATE (reason; expert shift copy X MiB)``."""
    why = "" if placed == total and total else (reasons[0] if reasons else "no expert blobs: not a MoE model")
    if len(reasons) > 1 and placed < total:
        why += f" (+{len(reasons) - 1} more)"
    shifted = counters.get("expert_shift_copy_bytes", 0)
    note = "; ".join(filter(None, [why, f"expert shift copy {shifted / MiB:.2f} MiB" if total else ""]))
    return Engaged(FEATURE, placed, total, "layer buffers placed", note)
