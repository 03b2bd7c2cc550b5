"""Faults a test asks a worker to inject, so the runner's handling of dying workers is tested for real.

Only tests set ``WORKBENCH_TEST_FAULT``; unset (always, outside the test suite) this module does nothing
and no strategy, command or notebook can reach it. The value is a JSON object mapping a run's label
(``RunConfig.label``; ``"*"`` for every run) to a fault name, or to ``{"fault": NAME, "once": PATH}`` to
fault only the first run that creates PATH. The fault fires at the load's first device copy: the file
is open, device buffers are allocated and reader threads may be running, as in a real crash mid-load.
``{"fault": "pause", "until": PATH}`` is no fault but a rendezvous: the run waits there until PATH
exists, so a test can break something else (fill the disk, lock the ledger) at a known point.

========  ======================================================================================
fault     what the worker does
========  ======================================================================================
segfault  reads address 0 (SIGSEGV; faulthandler prints where)
abort     ``abort()`` (SIGABRT), as a failed C assertion would
sigkill   SIGKILLs itself, as the OOM killer would
hang      sleeps forever: the runner's timeout must kill it
silent    exits 0 at once without printing a result
garbage   prints a JSON object that is no worker report, then exits 0
pause     waits until the file ``until`` names exists, then loads on as if nothing happened
========  ======================================================================================
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from typing import Any, Callable, Mapping

from workbench.settings import defaults
from workbench.errors import WorkbenchError

FAULTS = ("segfault", "abort", "sigkill", "hang", "silent", "garbage", "pause")
PAUSE_POLL_S = 0.02


def fault_for(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """(fault, argument) this run must inject, if ``WORKBENCH_TEST_FAULT`` names one for its label."""
    raw = defaults.injected_fault()
    if not raw:
        return None
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise WorkbenchError(f"{defaults.TEST_FAULT}: not JSON: {exc}") from None
    entry = table.get(str(config.get("label") or ""), table.get("*"))
    if entry is None:
        return None
    entry = {"fault": entry} if isinstance(entry, str) else dict(entry)
    name, once = entry.get("fault"), entry.get("once")
    if name not in FAULTS:
        raise WorkbenchError(f"{defaults.TEST_FAULT}: unknown fault {name!r}; known: {', '.join(FAULTS)}")
    if once is not None and not _claim(str(once)):
        return None
    return str(name), str(entry.get("until", ""))


def _claim(path: str) -> bool:
    """True for the first process that creates ``path`` (the run that faults once)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def arm(device: Any, config: Mapping[str, Any], stdout: Any) -> None:
    """Make ``device``'s first copy fire this run's fault (nothing when none applies)."""
    fault = fault_for(config)
    if fault is None:
        return
    copy: Callable[..., Any] = device.copy_h2d

    def faulty_copy(*args: Any, **kwargs: Any) -> Any:
        device.copy_h2d = copy  # the first copy only: a pause returns, and must not pause again
        fire(*fault, stdout)
        return copy(*args, **kwargs)

    device.copy_h2d = faulty_copy


def fire(name: str, until: str, stdout: Any) -> None:
    """Do what fault ``name`` says (all but ``pause`` end the process)."""
    print(f"workbench.measure.run.faults: injecting {name}", file=sys.stderr, flush=True)
    if name == "pause":
        while not os.path.exists(until):
            time.sleep(PAUSE_POLL_S)
        return
    if name == "segfault":
        ctypes.string_at(0)
        os.kill(os.getpid(), signal.SIGSEGV)  # where reading address 0 did not fault
    elif name == "abort":
        os.abort()
    elif name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif name == "hang":
        while True:
            time.sleep(3600)
    elif name == "garbage":
        stdout.write(json.dumps({"not": "a worker report"}) + "\n")
        stdout.flush()
    os._exit(0)  # silent and garbage: exit 0 mid-load, as a worker that returned too early would
