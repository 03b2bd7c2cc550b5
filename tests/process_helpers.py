"""Processes a test started or expects gone: is one alive (a zombie is not), wait for a condition."""
from __future__ import annotations

import time
from typing import Callable


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reaped or not, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def cmdline(pid: int) -> bytes:
    """``pid``'s command line, or b"" for one that ended between a listing of processes and this read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def wait_for(predicate: Callable[[], bool], seconds: float, what: str | Callable[[], str]) -> None:
    """Poll ``predicate`` every 50 ms; fail naming ``what`` (a text, or a callable giving it) after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what() if callable(what) else what} after {seconds} s")
