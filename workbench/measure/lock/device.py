"""A machine-wide device lock: one flock'd file per device, so two sweeps never time the same device.

The lock is advisory and cooperative: every workbench process on the machine takes it around each timed
run (cache preparation included, since evicting a file disturbs whoever is reading the disk). A process
that dies releases it automatically, because the kernel drops an flock with the last open descriptor.
The directory and files are opened as :mod:`workbench.measure.lock.lockfile` says: never through a link,
never writing into or changing the mode of a file this process did not create.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import time
from pathlib import Path
from types import TracebackType

from workbench.settings import defaults
from workbench.errors import WorkbenchError, printable
from workbench.measure.lock.lockfile import open_lock_dir, open_lock_file


def lock_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """The lock directory: ``directory``, else ``$WORKBENCH_LOCK_DIR``, else /tmp/workbench-locks."""
    return Path(directory) if directory else defaults.lock_dir()


def lock_name(device: str) -> str:
    """The lock file's name for a device spec; ``cuda`` and ``cuda:0`` share one, host and host-uma too."""
    name, _, ordinal = device.partition(":")
    if name.startswith("host"):
        return "device-host.lock"  # both host backends time the same CPU memory
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}_{ordinal or 0}")
    return f"device-{safe}.lock"


class DeviceLock:
    """``with DeviceLock("cuda:0") as lock: ...`` holds the device; ``lock.waited_s`` is the wait."""

    def __init__(self, device: str, directory: str | os.PathLike[str] | None = None,
                 timeout_s: float | None = None):
        self.device, self.timeout_s = device, timeout_s
        self.path = lock_dir(directory) / lock_name(device)
        self.waited_s = 0.0
        self._fd: int | None = None

    def check(self) -> None:
        """Refuse now, in one line, a lock directory or file that is unsafe (see
        :mod:`workbench.measure.lock.lockfile`), before anything is measured."""
        os.close(self._open())

    def acquire(self) -> float:
        """Block until the device is ours; returns the seconds spent waiting."""
        fd = self._open()
        t0 = time.perf_counter()
        try:
            self._wait(fd)
        except BaseException:
            os.close(fd)
            raise
        self.waited_s = time.perf_counter() - t0
        self._fd = fd
        self._write_owner(fd)
        return self.waited_s

    def _open(self) -> int:
        """The lock file's descriptor, opened inside a checked directory without following links."""
        dir_fd = open_lock_dir(self.path.parent)
        try:
            return open_lock_file(dir_fd, self.path)
        finally:
            os.close(dir_fd)

    def _wait(self, fd: int) -> None:
        if self.timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WorkbenchError(
                        f"{self.path}: device '{self.device}' still locked after {self.timeout_s:g} s "
                        f"(held by: {self.holder() or 'unknown'})") from None
                time.sleep(0.05)

    @staticmethod
    def _write_owner(fd: int) -> None:
        # Who holds it, for the error message of whoever waits; the lock itself is the flock. Only into
        # a file this user owns and that has no other name: never into someone else's file.
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_nlink != 1:
            return
        with contextlib.suppress(OSError):  # a read-only descriptor cannot say; the lock still holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)

    def holder(self) -> str:
        """The last owner line written into the lock file ('' if none), read without following links."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return ""
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ""
            return printable(os.read(fd, 200).decode(errors="replace").strip())
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DeviceLock":
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
