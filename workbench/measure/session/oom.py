"""Who the OOM killer takes under a balloon: the session's worker, never the process holding the balloon.

The OOM killer takes the process with the highest badness: its resident memory (locked pages
included) plus ``oom_score_adj`` × the machine's pages / 1000. A balloon's holder has nearly the whole
machine locked, so unprotected it is the victim — H200, 2026-12-04: 125,220 MiB locked, cell 1
started, the bench SIGKILLed 76 s in and the run lost. So once its balloon is inflated the holder sets
its own ``oom_score_adj`` to -1000 (never chosen; lowering it needs ``CAP_SYS_RESOURCE``: where that
is refused, as low as the kernel allows, and the balloon's line says so), and puts it back when the
balloon is let go; every worker started under it sets its own to +1000 before ``exec`` (raising is
always allowed; it would otherwise inherit the holder's -1000). That alone suffices: a process at +1000
outranks one at 0 whatever their sizes (the 2-core VM's root lacks ``CAP_SYS_RESOURCE``, and there the
worker alone was the victim: tests/test_session_oom.py). While the balloon inflates the holder keeps its
score: if the machine cannot give what the balloon asks, the balloon is what should die, before any
cell has begun.

A worker that died of SIGKILL under a balloon was the OOM killer's when the kernel's count of OOM kills
(``oom_kill`` in ``/proc/vmstat``, Linux 4.13 on) rose while it ran; else it was killed by someone
else (a timeout, a user), and the cell's record says which.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable

PROTECTED, EXPOSED = -1000, 1000  # the kernel's OOM_SCORE_ADJ_MIN and _MAX
_SELF = "/proc/self/oom_score_adj"


def read_oom_score_adj(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/oom_score_adj", encoding="ascii") as fh:
        return int(fh.read())


def _write_score(value: int) -> None:
    fd = os.open(_SELF, os.O_WRONLY)  # os calls only: this also runs between fork and exec
    try:
        os.write(fd, str(value).encode("ascii"))
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Protection:
    """The holder's ``oom_score_adj`` before and after :func:`protect_holder`, and why when not -1000."""

    before: int
    now: int
    refused: str = ""

    def text(self) -> str:
        if self.now == PROTECTED:
            return (f"the holder's oom_score_adj {PROTECTED} (was {self.before}: the OOM killer never takes it), "
                    f"each worker's +{EXPOSED}")
        now = f"stays {self.now}" if self.now == self.before else f"lowered to {self.now} (was {self.before})"
        return (f"the holder's oom_score_adj {now} ({PROTECTED} refused: {self.refused}; each worker's +{EXPOSED} "
                "still outranks it)")


def protect_holder() -> Protection:
    """Lower this process's ``oom_score_adj`` to -1000, else as low as the kernel allows: without
    ``CAP_SYS_RESOURCE`` no lower than the least value a privileged ancestor set (the kernel's
    ``oom_score_adj_min``, which it does not show), found by bisection (about ten writes)."""
    before = read_oom_score_adj()
    try:
        _write_score(PROTECTED)
        return Protection(before, read_oom_score_adj())
    except OSError as exc:
        refused = exc.strerror or str(exc)
    low, high = PROTECTED, before  # low refused, high allowed (it is the score now)
    while high - low > 1:
        mid = (low + high) // 2
        try:
            _write_score(mid)
            high = mid
        except OSError:
            low = mid
    with contextlib.suppress(OSError):
        _write_score(high)
    return Protection(before, read_oom_score_adj(), refused)


def unprotect_holder(protection: Protection) -> None:
    """Put the holder's score back (raising it is always allowed)."""
    try:
        _write_score(protection.before)
    except OSError:
        pass


def exposed(preexec: Callable[[], None] | None = None, score: int = EXPOSED) -> Callable[[], None]:
    """A ``preexec_fn``: ``preexec`` (if any), then the child's ``oom_score_adj`` set to ``score`` (+1000)."""
    def run() -> None:
        if preexec is not None:
            preexec()
        _write_score(score)
    return run


def machine_oom_kills() -> int:
    """The kernel's count of OOM kills since boot (``/proc/vmstat`` ``oom_kill``; -1 where it keeps none)."""
    try:
        with open("/proc/vmstat", encoding="ascii") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("oom_kill ")), -1)
    except OSError:
        return -1


__all__ = ["EXPOSED", "PROTECTED", "Protection", "exposed", "machine_oom_kills", "protect_holder",
           "read_oom_score_adj", "unprotect_holder"]
