"""Joining the threads of a load within a bound: a load can fail, it can never hang.

Every thread a load starts (lanes, ring readers, a copier's issuer and retirer, background staging)
polls a stop event or a sentinel between units of work, and a unit is bounded (one pread, one copy
call, one fence). Once told to stop, a thread gets :data:`STOP_GRACE_S` to end; one still running then
is named with where it is (its innermost frame; every frame of it on stderr, as faulthandler prints a
stack) and the join gives up on it: the caller raises :class:`~workbench.errors.ThreadsStuck` in one
line. The threads are daemons, so a worker process still exits.
"""
from __future__ import annotations

import sys
import sysconfig
import threading
import time
import traceback
from typing import Any, Iterable

STOP_GRACE_S = 30.0  # one unit of work (a 16 MiB pread off a cold disk, a fence) is far less


def join_within(threads: Iterable[threading.Thread], seconds: float | None = None) -> list[str]:
    """Join every thread, all of them within ``seconds`` (default :data:`STOP_GRACE_S`) in all; returns
    where each one still alive is (``name at file:line in function``), its stack printed to stderr."""
    threads = list(threads)
    deadline = time.monotonic() + (STOP_GRACE_S if seconds is None else seconds)
    for t in threads:
        if t.ident is not None and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threads if t.is_alive() and t is not threading.current_thread()]
    return [_where(t) for t in stuck]


def _where(thread: threading.Thread) -> str:
    """``name at file:line in function``: the innermost frame outside Python's own library (what the
    thread was doing), and the library call it waits in, if any."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return f"{thread.name} (no frame)"
    print(f"workbench: thread {thread.name} still running after its stop:", file=sys.stderr)
    traceback.print_stack(frame, file=sys.stderr)
    inner, own = frame, frame
    while own is not None and own.f_code.co_filename.startswith(_STDLIB):
        own = own.f_back
    where = f"{thread.name} at {_at(own or inner)}"
    return where if own is inner or own is None else f"{where}, waiting in {_at(inner)}"


def _at(frame: Any) -> str:
    return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} in {frame.f_code.co_name}"


_STDLIB = sysconfig.get_paths()["stdlib"]
