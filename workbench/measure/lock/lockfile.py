"""Opening a device lock's directory and file without letting anyone else's file stand in for them.

The lock directory is shared by every user of the machine, so a file or link planted there must never
make the workbench write into, or change the mode of, a file it did not create (a symlink to a root-owned
file would otherwise be made world-writable the next time root runs a sweep). The rules, after systemd's
``openat`` discipline and SQLite's journal handling:

- the directory is owned by root or by this user, and if others may write into it, it is sticky (so no
  one can replace a lock file another user made); so is every directory above it, and every symlink on
  the way must be root's or this user's (the path is walked from ``/`` one name at a time with
  ``O_NOFOLLOW``, so a parent anyone may write into cannot swap the directory for a link to /etc between
  a check and its use, and a directory the workbench makes gets its mode through its descriptor);
- lock files are opened relative to that directory, never through a symlink (``O_NOFOLLOW``), and
  created with ``O_EXCL``: only a file this process created gets its mode set;
- an existing lock file must be a regular file with one name; the owner line is written only into a
  file this user owns.

Anything else is one :class:`~workbench.errors.LockError` line saying what was found.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from workbench.errors import LockError

DIR_MODE = 0o1777  # a directory the workbench creates: every user may lock, no one may replace another's file
FILE_MODE = 0o644  # a lock file the workbench creates: others open it read-only, which is enough for flock
_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY  # a FIFO must not block the open


def open_lock_dir(directory: Path) -> int:
    """A descriptor of ``directory`` (created sticky and shared when missing), once it and every
    directory above it are safe to lock in: walked from ``/`` one name at a time, each opened without
    following a link, so what is checked is what is used."""
    return _walk(os.path.abspath(directory), Path(directory))


def _walk(path: str, shown: Path) -> int:
    """Open ``path`` from ``/`` one component at a time: each directory checked with :func:`dir_problem`
    (an ancestor anyone may write into unsticky could swap the lock directory for a link to /etc), each
    link checked to be root's or this user's before it is followed, the last component made when
    missing (and only then given its shared mode, through the descriptor)."""
    parts, hops = list(Path(path).parts[1:]), 0
    fd, here = _open_dir("/", None, shown, Path("/"), final=False), Path("/")
    try:
        while parts:
            name = parts.pop(0)
            last = not parts
            if name in ("", "."):
                continue
            st = _lstat(name, fd, here, shown, create=last)
            if st is None:  # made just now, by us: no one else can have replaced it in a safe parent
                fd = _replace(fd, _made_dir(name, fd, here / name, shown))
                here = here / name
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > 40:
                    raise LockError(shown, "cannot open the lock directory: too many symbolic links")
                _check_owner(here / name, st, "a symbolic link")
                target = Path(os.readlink(name, dir_fd=fd))
                parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
                if target.is_absolute():
                    fd, here = _replace(fd, _open_dir("/", None, shown, Path("/"), final=False)), Path("/")
                continue
            here = here.parent if name == ".." else here / name
            fd = _replace(fd, _open_dir(name, fd, shown, here, final=not parts))
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_dir(name: str, dir_fd: int | None, shown: Path, where: Path, final: bool) -> int:
    """``name`` (in ``dir_fd``) opened as a directory without following a link, and checked."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        raise LockError(shown, f"cannot open the lock directory: {where}: {exc.strerror}") from None
    problem = dir_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        above = "" if final else f"{where} (above it) is "
        raise LockError(shown, f"unsafe lock directory: {above}{problem}")
    return fd


def _lstat(name: str, dir_fd: int, here: Path, shown: Path, create: bool) -> os.stat_result | None:
    """``name``'s own status in ``dir_fd``; None when it was missing and is now made (``create``: the
    lock directory itself, mode 0700 until its descriptor sets the shared mode; an ancestor, 0755)."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    try:
        os.mkdir(name, 0o700 if create else 0o755, dir_fd=dir_fd)
    except FileExistsError:  # another process made it first: checked like any other
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise LockError(shown, f"cannot create the lock directory: {here / name}: {exc.strerror}") from None
    return None if create else os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def _made_dir(name: str, dir_fd: int, where: Path, shown: Path) -> int:
    fd = _open_dir(name, dir_fd, shown, where, final=True)
    if os.fstat(fd).st_uid == os.geteuid():
        os.fchmod(fd, DIR_MODE)  # ours, just made: every user may lock, no one may replace another's file
    return fd


def _replace(old: int, new: int) -> int:
    os.close(old)
    return new


def dir_problem(st: os.stat_result) -> str:
    """What makes a directory unsafe for shared lock files ('' when nothing does)."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid not in (0, os.geteuid()):
        return (f"owned by uid {st.st_uid}, neither root nor this user (uid {os.geteuid()}), who could replace "
                "the lock files in it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return (f"mode {stat.S_IMODE(st.st_mode):04o}: writable by others but not sticky, so anyone could "
                "replace the lock files in it")
    return ""


def open_lock_file(dir_fd: int, path: Path) -> int:
    """The lock file ``path.name`` inside the directory ``dir_fd``: created (O_EXCL, mode 0644) when
    missing, else opened without following a link and checked to be a regular file with one name."""
    name = path.name
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, FILE_MODE, dir_fd=dir_fd)
    except FileExistsError:
        return _open_existing(dir_fd, path)
    except OSError as exc:
        raise LockError(path, f"cannot create the lock file: {exc.strerror}") from None
    os.fchmod(fd, FILE_MODE)  # ours, just made: the mode is exact whatever the umask
    return fd


def _open_existing(dir_fd: int, path: Path) -> int:
    try:
        fd = os.open(path.name, os.O_RDONLY | _OPEN, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LockError(path, "the lock file is a symbolic link; refusing to follow it (remove it: "
                                  "the workbench creates its lock files itself)") from None
        raise LockError(path, f"cannot open the lock file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LockError(path, "the lock file is not a regular file; refusing to use it (remove it)")
        if st.st_nlink != 1:
            raise LockError(path, f"the lock file has {st.st_nlink} names (a hard link to another file); "
                                  "refusing to use it (remove it)")
        if st.st_uid != os.geteuid():
            return fd  # someone else's lock file: read-only is enough to flock, and nothing is written
        return _reopen_writable(dir_fd, path, fd, st)
    except BaseException:
        os.close(fd)
        raise


def _reopen_writable(dir_fd: int, path: Path, fd: int, st: os.stat_result) -> int:
    """This user's own lock file, opened for writing its owner line (the same file, checked by inode)."""
    try:
        rw = os.open(path.name, os.O_RDWR | _OPEN, dir_fd=dir_fd)
    except OSError:
        return fd
    again = os.fstat(rw)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):  # replaced in between: keep the checked one
        os.close(rw)
        return fd
    os.close(fd)
    return rw


def _check_owner(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid not in (0, os.geteuid()):
        raise LockError(path, f"unsafe lock directory: {what} owned by uid {st.st_uid}, neither root nor "
                              "this user")
