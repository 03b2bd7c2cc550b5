"""Direct reads: windows of file ranges read straight into device buffers whose memory is host memory.

On a device where :meth:`~workbench.upload.base.Device.host_view` gives the buffer's own memory (the
host backends) a staging hop is a second memcpy of every byte on the same cores: the read *is* the
upload. :class:`DirectReader` takes the same windows (:func:`~workbench.upload.staged_read.plan_windows`)
and sources (a :class:`~workbench.upload.staged_read.SharedQueue`, or one share per reader) as the
staged reader and runs the same reader threads, but reads each window's pieces with ``preadv``
straight into their buffers' views: pieces that follow each other in the file (a blob's end and the
next tensor's start) go in one ``preadv`` of several buffers, a gap between them (alignment padding)
starts the next call, so padding is never read. Nothing is in flight when a read returns.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Sequence

from workbench.errors import FormatError
from workbench.upload.base import Device
from workbench.upload.staged_read import StagedReader, StagedTally, Window

IOV_MAX = 1024  # the kernel's UIO_MAXIOV: buffers one preadv takes


class DirectReader(StagedReader):
    """Reads windows straight into ``device``'s buffers (``device.host_view`` must give each one's
    memory: :meth:`usable` says whether it does). ``open_file`` and ``after_read`` as the staged
    reader's."""

    def __init__(self, device: Device, *, open_file: Callable[[str], int] | None = None,
                 after_read: Callable[[str, int, int], None] | None = None):
        super().__init__(device, None, open_file=open_file, after_read=after_read)  # type: ignore[arg-type]
        self._views: dict[int, memoryview] = {}
        self._views_lock = threading.Lock()

    @staticmethod
    def usable(device: Device, buffers: Sequence[object]) -> bool:
        """Whether ``device``'s memory is host memory the readers may write (a view of a buffer)."""
        return bool(buffers) and device.host_view(buffers[0]) is not None  # type: ignore[arg-type]

    def _view(self, buffer: object) -> memoryview:
        with self._views_lock:
            view = self._views.get(id(buffer))
            if view is None:
                view = self.device.host_view(buffer)  # type: ignore[arg-type]
                if view is None:
                    raise ValueError(f"{self.device.info().backend}: no host view of {buffer!r}: stage it instead")
                self._views[id(buffer)] = view
            return view

    def read_window(self, fd: int, w: Window, stop: threading.Event | None = None) -> StagedTally | None:
        """Read window ``w``'s pieces through ``fd`` into their buffers (None once ``stop`` is set)."""
        if stop is not None and stop.is_set():
            return None
        t0 = time.perf_counter_ns()
        runs: list[tuple[int, list[memoryview]]] = []  # (file offset, buffers read contiguously from it)
        end = -1
        for p in w.pieces:
            dst = self._view(p.buffer)[p.dst : p.dst + p.nbytes]
            at = w.lo + p.start
            if at == end and len(runs[-1][1]) < IOV_MAX:
                runs[-1][1].append(dst)
            else:
                runs.append((at, [dst]))
            end = at + p.nbytes
        moved = 0
        try:
            for offset, views in runs:
                moved += preadv_full(fd, views, offset, w.file)
        finally:
            for _, views in runs:
                for v in views:
                    v.release()
        if self.after_read is not None:
            self.after_read(w.file, w.lo, w.hi - w.lo)
        return StagedTally(1, w.nbytes, moved, 0, (time.perf_counter_ns() - t0) // 1000, 0, 0)

    def close(self) -> None:
        """Let go of the buffers' views (before the buffers are freed)."""
        with self._views_lock:
            for view in self._views.values():
                view.release()
            self._views.clear()


def preadv_full(fd: int, views: list[memoryview], offset: int, path: str) -> int:
    """Fill every view in order from the file at ``offset`` (one ``preadv`` while none is short);
    the bytes read."""
    views = list(views)  # the caller's list keeps its views (to release them); short reads slice these
    total = sum(len(v) for v in views)
    done, k = 0, 0
    while k < len(views):
        n = os.preadv(fd, views[k:], offset + done)
        if n == 0:
            raise FormatError(path, "size", f"end of file at {offset + done}, wanted {offset + total}: "
                                            "truncated since it was indexed?")
        done += n
        while k < len(views) and n >= len(views[k]):  # whole views filled
            n -= len(views[k])
            k += 1
        if n:  # a short read inside views[k]: the rest of it next
            views[k] = views[k][n:]
    return done
