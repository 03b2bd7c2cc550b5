"""Opening a model file: never waiting on what was put in its place.

A ``stat`` that says "regular file" proves nothing about the ``open`` after it: between the two, the
path can become a FIFO (whose open blocks until a writer comes — forever, for a load) or a link to a
device (``/dev/zero``: endless zeros read as tensors; a tape, a terminal). So every open of a model file
goes through :func:`open_regular`: ``O_NONBLOCK`` (a FIFO's open returns at once), then ``fstat`` of the
descriptor — the file actually opened — must be a regular file, and, where the caller stat'ed it first,
the same file (device and inode); then ``O_NONBLOCK`` is cleared so reads behave as usual (and
``O_DIRECT``, when asked for, set: ``fcntl`` takes it, and refuses it where ``open`` would).
"""
from __future__ import annotations

import fcntl
import os
import stat
from typing import BinaryIO

from workbench.errors import FormatError


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY,
                 expect: os.stat_result | None = None) -> int:
    """A descriptor of the regular file at ``path`` (``flags`` | O_CLOEXEC), or FormatError in one line:
    missing, a directory, not a regular file (a FIFO, a device), or not the file ``expect`` stat'ed."""
    direct = flags & getattr(os, "O_DIRECT", 0)  # set once the file is known (a FIFO refuses it: EINVAL)
    try:
        fd = os.open(path, (flags & ~direct) | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FormatError(path, "path", "no such file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "is a directory, not a file" if stat.S_ISDIR(st.st_mode) else f"not a regular file ({_kind(st)})"
            raise FormatError(path, "path", kind)
        if expect is not None and (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
            raise FormatError(path, "path", "replaced between its stat and its open (another file is there now)")
        keep = fcntl.fcntl(fd, fcntl.F_GETFL) & ~(0 if flags & os.O_NONBLOCK else os.O_NONBLOCK)
        fcntl.fcntl(fd, fcntl.F_SETFL, keep | direct)  # EINVAL where O_DIRECT is unsupported, as open gives
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular_file(path: str | os.PathLike[str], expect: os.stat_result | None = None) -> BinaryIO:
    """:func:`open_regular` as a buffered binary file object (``with open_regular_file(p) as f``)."""
    return open(open_regular(path, os.O_RDONLY, expect), "rb")


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
