"""Descriptors a load holds at once, and the limit it may raise itself to.

A load keeps one descriptor per file of the model while it runs (``LoadContext.fd``: several threads
may read through it, so none can be closed early), and each reader thread of a staged strategy opens its
own (its own readahead state). 10,000 shards under ``ring``'s readers once ran into EMFILE after
168 s (issue 24 §2). So:

- a reader keeps at most :data:`READER_FDS` files open (:class:`ReaderFiles`: it moves through its
  windows file by file, so the least recently used one is a file it has finished);
- before a load (and in the runner's preflight) :func:`check_descriptors` makes room for one descriptor
  per file: it raises the soft ``RLIMIT_NOFILE`` to the hard limit when the set needs it (as Go's
  runtime does for every program), and where even the hard limit is too low it says so in one line,
  before anything is opened, instead of failing part-way.
"""
from __future__ import annotations

import os
import resource
from collections import OrderedDict
from typing import Callable

from workbench.errors import FormatError
from workbench.formats.drift import check_unchanged
from workbench.formats.index import TensorIndex
from workbench.formats.opening import open_regular

READER_FDS = 4  # files a reader thread keeps open: the one it reads and a few it may come back to
RESERVE = 128  # stdio, the ledger, pipes, a device driver's own, reader threads' READER_FDS each


def descriptors_in_use() -> int:
    """Descriptors this process holds now (0 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir held
    except OSError:
        return 0


def check_descriptors(path: str, files: int) -> None:
    """Make room for ``files`` more descriptors (raising the soft limit up to the hard one), or raise
    FormatError naming ``path``: a model of that many files cannot be loaded under this limit."""
    need = descriptors_in_use() + files + RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard))
            return
        except (ValueError, OSError):
            pass
    raise FormatError(path, "files", f"{files:,} files need {need:,} open descriptors at once (with this "
                      f"process's own), more than RLIMIT_NOFILE allows (soft {soft:,}, hard {hard:,}): "
                      "raise it (ulimit -Hn, or LimitNOFILE= in a service)")


class ReaderFiles:
    """One reader thread's descriptors, at most ``keep`` open: the least recently used one is closed
    when another file is needed. Not shared between threads (a shared table could close a descriptor
    another thread is reading through)."""

    def __init__(self, open_file: Callable[[str], int], keep: int = READER_FDS):
        self.open_file, self.keep = open_file, max(1, keep)
        self._fds: OrderedDict[str, int] = OrderedDict()
        self.opened = 0  # how many opens (a file re-opened after it was closed counts again)

    def fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        while len(self._fds) >= self.keep:
            os.close(self._fds.popitem(last=False)[1])
        fd = self._fds[path] = self.open_file(path)
        self.opened += 1
        return fd

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])


def open_checked(index: TensorIndex, path: str, flags: int = os.O_RDONLY) -> int:
    """A descriptor of the model file ``path`` (:func:`open_regular`: never waits on a FIFO or device
    put in its place), refused if the file changed since ``index`` was made."""
    fd = open_regular(path, flags)
    try:
        check_unchanged(index.file(path), fd)
    except BaseException:
        os.close(fd)
        raise
    return fd
