"""The directories the workbench writes into, walked without following links, and files written there
through the directory's descriptor.

The rule (issue 24): the path a user gives, and the data root and a folder in it that a user pointed
elsewhere on purpose (``data/models`` a link to another disk), may be links — that part of a path is
the *anchor*, opened as the user named it. Below it, where the workbench makes and rewrites things (a
model set's directory, a report's, a sweep's runs, a figures directory: the *made* part), every
component is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the one above (made when missing),
and every file is created, checked and renamed relative to that descriptor (``openat``, ``renameat``),
so a link planted anywhere below the anchor is refused in one line, never written through.

A file is written to a new, exclusively created ``.<name>.<random>.partial`` beside its target, flushed
to disk and renamed over it; on any error the temporary file is removed and the target is as it was
(full disk, read-only file system, a missing directory: one :class:`~workbench.errors.OutputError` line).
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Callable

from workbench.errors import OutputError

NAME_MAX = 255  # bytes in one file name (Linux, and every file system the workbench writes to)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutDir:
    """A directory held open by descriptor; ``path`` only names it in messages."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, made: int = 0, create: bool = True) -> OutDir:
        """``path`` opened for writing: its last ``made`` components without following a link (each made
        when missing and ``create``), the rest (the anchor) as the user named it (made when missing)."""
        target = Path(os.path.abspath(path))
        parts = target.parts[len(target.parts) - made:] if made else ()
        anchor = Path(*target.parts[:len(target.parts) - len(parts)])
        try:
            if create:
                anchor.mkdir(parents=True, exist_ok=True)
            fd = os.open(anchor, _DIR)
        except OSError as exc:
            raise OutputError(anchor, f"cannot open the directory to write in: {reason(exc)}") from None
        out = cls(fd, anchor)
        for name in parts:
            out = out._descend(name, create)
        return out

    def sub(self, name: str, create: bool = True) -> OutDir:
        """The directory ``name`` in this one (made when missing), never through a link; this one stays open."""
        return OutDir(os.dup(self.fd), self.path)._descend(name, create)

    def _descend(self, name: str, create: bool) -> OutDir:
        where = self.path / name
        try:
            if create:
                try:
                    os.mkdir(name, 0o777, dir_fd=self.fd)
                except FileExistsError:
                    pass
            fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            problem = self._refusal(name, exc)
            self.close()
            raise OutputError(where, problem) from None
        self.close()
        return OutDir(fd, where)

    def _refusal(self, name: str, exc: OSError) -> str:
        st = self.lstat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            try:
                to = os.readlink(name, dir_fd=self.fd)
            except OSError:
                to = "?"
            return (f"is a link (to {to}); the workbench never writes through a link below {self.path} "
                    "(name the link's target itself, or remove the link)")
        if st is not None and not stat.S_ISDIR(st.st_mode):
            return "exists and is not a directory; refusing to write into it"
        return f"cannot make or open the directory: {reason(exc)}"

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link not followed), or None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return None

    def head(self, name: str, size: int = 1 << 20) -> tuple[bytes, int] | None:
        """The first ``size`` bytes of the regular file ``name`` and its size; None for anything else
        (missing, a link, a FIFO, a directory)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            return (os.pread(fd, size, 0), st.st_size) if stat.S_ISREG(st.st_mode) else None
        except OSError:
            return None
        finally:
            os.close(fd)

    def proc_path(self, name: str) -> str:
        """A name for ``name`` in this directory that a library opening files by path (gguf-py's writer)
        resolves through the descriptor, not through the path the user gave."""
        return f"/proc/self/fd/{self.fd}/{name}"

    def write(self, name: str, fill: Callable[[int, str], None]) -> Path:
        """Make ``name`` whole or not at all: ``fill(fd, proc_path)`` writes a new temporary file (through
        its descriptor, or by the path for a library that needs one), which is flushed and renamed over
        ``name``; on any error it is removed and ``name`` is as it was (one OutputError line)."""
        tmp, fd = self._new_temp(name)
        try:
            fill(fd, self.proc_path(tmp))
            os.fsync(fd)
            if not _same(os.fstat(fd), self.lstat(tmp)):
                raise OutputError(self.path / name, "its temporary file was replaced while being written; "
                                                    "nothing replaced")
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            tmp = ""
        except OSError as exc:
            raise OutputError(self.path / name, f"cannot write: {reason(exc)}; nothing replaced") from None
        finally:
            os.close(fd)
            if tmp:
                try:
                    os.unlink(tmp, dir_fd=self.fd)
                except OSError:
                    pass
        return self.path / name

    def write_bytes(self, name: str, data: bytes) -> Path:
        """``data`` as the file ``name`` (see :meth:`write`)."""
        def fill(fd: int, _path: str) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        return self.write(name, fill)

    def _new_temp(self, name: str) -> tuple[str, int]:
        stem = _cut_to_bytes(name, NAME_MAX - len(".{}.12345678.partial".format("")))  # a legal name's temp is too
        for _ in range(100):
            tmp = f".{stem}.{secrets.token_hex(4)}.partial"
            try:
                return tmp, os.open(tmp, _NEW, 0o666, dir_fd=self.fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise OutputError(self.path / name, f"cannot write: {reason(exc)}; nothing replaced") from None
        raise OutputError(self.path / name, "cannot make a temporary file beside it")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _same(a: os.stat_result, b: os.stat_result | None) -> bool:
    return b is not None and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def reason(exc: OSError) -> str:
    """An OSError as a few words ('No space left on device', 'Read-only file system')."""
    if exc.errno == errno.EFBIG:
        return "File too large (past the file-size limit)"
    return exc.strerror or str(exc)


def _cut_to_bytes(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` bytes of the file system's encoding, never inside a character
    (bytes that are no UTF-8 are dropped: the cut name only prefixes a random temporary one)."""
    raw = os.fsencode(name)
    return name if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")
