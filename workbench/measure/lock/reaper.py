"""Processes the runner starts die with it, their whole tree included.

- A worker is started with a parent-death signal (``PR_SET_PDEATHSIG``, SIGKILL): if the runner dies —
  SIGKILL, OOM, a crash — the kernel kills the worker, which would otherwise run on under init, holding
  the device after the device lock was released.
- An external engine may start processes that leave its session and process group (``setsid()``, a
  daemon's double fork), which no process-group kill reaches. So an engine runs under a small reaper
  (this file, run by the interpreter on its own: standard library only): it becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``, so
  every orphan of the engine's tree is re-parented to it rather than to init), starts the engine with a
  parent-death signal of its own, and on SIGTERM — from the runner after the marker or a timeout, or
  from the kernel when the runner dies — SIGKILLs every process below it and reaps them before it exits.
  Left alone, it exits when the engine's whole tree has exited, with the engine's own exit status.

The reaper reports on a pipe when it forked the engine (the clock time of the fork, so the reaper's own
start-up is never in the measured window) or why the engine could not be started.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_GRACE_S = 10.0  # how long a stopped reaper gets to kill and reap the tree before its group is killed

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl  # resolved here, before any fork: a child calls it and nothing else


def die_with_me(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: the child receives ``sig`` when the thread that started it ends (the runner
    dies); a runner that died before the child got there makes the child exit at once."""
    parent = os.getpid()

    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, theirs, …), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def spawn(argv: Sequence[str], *, shell: bool, stdout: int, stderr: int) -> tuple[subprocess.Popen, int]:
    """Start ``argv`` (or ``/bin/sh -c argv[0]`` when ``shell``) under a reaper in its own session;
    returns the reaper and the read end of its status pipe (see :func:`read_started`)."""
    read, write = os.pipe()
    # run as a file, isolated and without site: it needs only the standard library, and starts in ms
    cmd = [sys.executable, "-I", "-S", os.path.abspath(__file__), str(write), "--shell" if shell else "--", *argv]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, close_fds=True,
                                pass_fds=(write,), start_new_session=True, preexec_fn=die_with_me(signal.SIGTERM))
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return proc, read


def read_started(fd: int, deadline: float) -> tuple[int, float] | str | None:
    """What the reaper said: (engine pid, monotonic time of its fork), or why it could not start it
    (a string), or None when it said nothing by ``deadline`` (``time.monotonic()``). Closes ``fd``."""
    import select

    data = b""
    try:
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return "the reaper exited before starting the engine" if not data else data.decode()
            data += chunk
    finally:
        os.close(fd)
    word, _, rest = data.decode(errors="replace").strip().partition(" ")
    if word == "ok":
        pid, at = rest.split()
        return int(pid), float(at)
    return rest or "the engine could not be started"


def stop(proc: subprocess.Popen) -> None:
    """Have the reaper kill the engine's whole tree and exit; if it has not in time, kill what is below
    it (still its descendants: orphans of the tree are re-parented to it), then its group."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(STOP_GRACE_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            for pid in descendants(proc.pid):
                _kill(pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _Stop(Exception):
    """SIGTERM, SIGHUP or SIGINT reached the reaper: kill the tree."""


def _stop(signum: int, frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # a second signal must not cut the cleanup short
        signal.signal(sig, signal.SIG_IGN)
    raise _Stop(signum)


def _kill_tree() -> None:
    """SIGKILL every process below this one and reap them, until none is left (an orphan of the tree is
    re-parented here, so a later pass finds what an earlier one orphaned)."""
    me = os.getpid()
    for _ in range(200):
        alive = descendants(me)
        for pid in alive:
            _kill(pid)
        _reap(block=False)
        if not alive:
            return
        time.sleep(0.01)


def _reap(block: bool) -> tuple[int, int] | None:
    """Reap children; returns (pid, status) of the last reaped, None when there are none left to wait for."""
    last = None
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return last if last is not None else None
        if pid == 0:
            return last
        last = (pid, status)
        if block:
            return last


def _start(argv: list[str], shell: bool, status: int) -> int:
    """Fork and exec the engine; report its pid and fork time (or the exec error) on ``status``."""
    errors_r, errors_w = os.pipe2(os.O_CLOEXEC)
    at = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the engine: dies with the reaper, default signal handling, nothing of ours open
        try:
            os.close(errors_r)
            os.close(status)
            _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            if shell:
                os.execv("/bin/sh", ["/bin/sh", "-c", argv[0]])
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(errors_w, f"{exc.strerror or exc} ({argv[0]})".encode())
        finally:
            os._exit(127)
    os.close(errors_w)
    failed = os.read(errors_r, 4096)
    os.close(errors_r)
    os.write(status, b"error " + failed + b"\n" if failed else f"ok {pid} {at!r}\n".encode())
    os.close(status)
    return 0 if failed else pid


def main(argv: list[str] | None = None) -> int:
    """``python -I -S reaper.py STATUS_FD (-- ARGV… | --shell LINE)``."""
    args = sys.argv[1:] if argv is None else argv
    status, shell, program = int(args[0]), args[1] == "--shell", args[2:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _stop)
    engine, code = 0, 143
    try:
        engine = _start(program, shell, status)
        if not engine:
            return 127
        code = _wait_tree(engine)
    except _Stop:
        _kill_tree()
    _kill_tree()  # nothing the engine started outlives the reaper
    return code


def _wait_tree(engine: int) -> int:
    """Reap until the engine and everything it left behind exited; the engine's exit status."""
    code = 0
    while True:
        reaped = _reap(block=True)
        if reaped is None:
            return code
        pid, status = reaped
        if pid == engine:
            code = os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    result = main()
    if result < 0:  # the engine died of a signal: so does the reaper, for the runner to see the same status
        signal.signal(-result, signal.SIG_DFL)
        os.kill(os.getpid(), -result)
    sys.exit(result)
