"""A swap file for a pressure measurement, that never outlives the run that made it.

The second write-up's symptom was rising swap and major faults; a machine without swap can show the
leak's cost only as page-cache reclaim and the OOM killer. ``SwapFile(directory, mib)`` makes
``.wb-swap-<pid>-<start ticks>-<hex>`` there (allocated, ``mkswap``), and a small guard process
(this file, run by the interpreter on its own: standard library only) turns it on with swapon(2) and
waits on a pipe from the runner. When the pipe closes — the runner left the ``with``, or died
however it died, SIGKILL included — the guard turns the swap off and deletes the file. The guard
leads its own session, so a kill of the runner's process group does not take it first. Should the
guard itself be killed, the next ``SwapFile`` in that directory turns off and deletes every
``.wb-swap-*`` whose runner is gone (the ledger's owner test). Turning swap on needs CAP_SYS_ADMIN
and a file system that can hold a swap file: where it cannot, the reason is one line and the
measurement says it ran without swap.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys


class SwapUnavailable(OSError):
    """Swap cannot be turned on here (the reason is the message)."""


class SwapFile:
    """``mib`` MiB of swap in ``directory`` from ``__enter__`` to ``__exit__`` (see the module doc)."""

    def __init__(self, directory: str | os.PathLike[str], mib: int):
        self.directory, self.size = os.fspath(directory), int(mib) << 20
        self.path = ""
        self.reaped: tuple[str, ...] = ()
        self._guard: subprocess.Popen | None = None

    def __enter__(self) -> "SwapFile":
        from workbench.measure.lock.scratch import owned_name

        self.reaped = reap_stale(self.directory)
        self.path = os.path.join(self.directory, owned_name("swap"))
        try:
            _make(self.path, self.size)
            self._guard = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), self.path], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
            said = self._guard.stdout.readline().decode(errors="replace").strip()
            if said != "on":
                self._guard.wait()
                raise SwapUnavailable(0, said.removeprefix("error ") or "the swap guard exited")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._guard is not None:
            self._guard.stdin.close()  # the guard turns it off and deletes it
            self._guard.wait()
            self._guard = None
        if self.path and os.path.exists(self.path):
            _off(self.path)
            _unlink(self.path)


def enabled() -> list[str]:
    """Paths of the swap areas on now (/proc/swaps)."""
    try:
        with open("/proc/swaps", encoding="utf-8") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return []
    return [line.split()[0].encode().decode("unicode_escape").removesuffix("(deleted)") for line in lines if line]


def reap_stale(directory: str) -> tuple[str, ...]:
    """Turn off and delete every ``.wb-swap-*`` in ``directory`` whose runner is gone; their paths."""
    from workbench.measure.lock.scratch import reap_owned

    return reap_owned(directory, "swap", before=_off)


def _make(path: str, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)  # swapon refuses a file with holes
    except OSError as exc:
        raise SwapUnavailable(exc.errno or 0, f"cannot allocate {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        done = subprocess.run(["mkswap", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SwapUnavailable(0, f"mkswap: {exc}") from None
    if done.returncode != 0:
        raise SwapUnavailable(0, f"mkswap {path}: {(done.stderr or done.stdout).strip()[-200:]}")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _on(path: str) -> str:
    """swapon(2); "" when on, else why not."""
    if _libc().swapon(path.encode(), 0) == 0:
        return ""
    err = ctypes.get_errno()
    return f"swapon {path}: {os.strerror(err)}" + (" (needs CAP_SYS_ADMIN)" if err == 1 else "")


def _off(path: str) -> None:
    if path in enabled():
        _libc().swapoff(path.encode())


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _guard(path: str) -> int:
    """Turn ``path`` on, say so, wait for stdin to close, turn it off and delete it."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # only the pipe's end stops it
        signal.signal(sig, signal.SIG_IGN)
    why = _on(path)
    print("on" if not why else f"error {why}", flush=True)
    try:
        if not why:
            sys.stdin.buffer.read()
    finally:
        _off(path)
        _unlink(path)
    return 0 if not why else 1


if __name__ == "__main__":
    sys.exit(_guard(sys.argv[1]))
