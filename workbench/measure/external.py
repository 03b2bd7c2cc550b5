"""External engine mode: time another program's load from spawn to a log-line marker, then kill it.

The command runs in its own session (process group) with its stdout and stderr on a pseudo-terminal,
so a C or Python program line-buffers its output as it would in a shell: with a plain pipe, stdio's
block buffering would hold the marker line back and silently add time to the measurement.
The clock stops at the first line (split on ``\\n`` or ``\\r``) matching the regular expression; then
the whole process group is killed, so prompt evaluation and generation are never timed.
"""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from collections import deque
from typing import Any, Sequence

from workbench.errors import ParamError, WorkbenchError
from workbench.measure.attempt import AttemptResult
from workbench.records import ExternalRun, RunConfig, WorkerReport
from workbench.measure.spawn import Outcome, kill_group

TAIL_LINES = 20


def compile_marker(marker: str) -> re.Pattern[bytes]:
    """The marker as a bytes regex; a bad pattern is a ParamError naming it."""
    try:
        return re.compile(marker.encode())
    except re.error as exc:
        raise ParamError("external", "marker", f"not a regular expression: {marker!r} ({exc})") from None


def time_external(cmd: str, marker: str, *, timeout_s: float = 600.0, nbytes: int = 0) -> Outcome:
    """Spawn ``cmd`` (a shell command line), stop the clock at the marker line, kill its group."""
    pattern = compile_marker(marker)
    master, slave = pty.openpty()
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        os.close(master)
        os.close(slave)
        return Outcome(pid=None, load_s=None, wall_s=None, error=f"cannot start {cmd!r}: {exc}")
    os.close(slave)  # the child holds its copy; EOF (EIO) arrives when every writer is gone
    try:
        hit, tail = _watch(master, pattern, t0 + timeout_s)
        t_marker = time.perf_counter()
        exited = None if hit is not None else _exit_code(proc, t0 + timeout_s)
    finally:
        kill_group(proc)
        os.close(master)
    wall = time.perf_counter() - t0
    report = WorkerReport(pid=proc.pid, device_info={"backend": "external"}, external=ExternalRun(
        cmd=cmd, marker=marker, returncode=exited, output_tail=tuple(tail), marker_line=hit))
    if hit is not None:
        return Outcome(pid=proc.pid, load_s=t_marker - t0, wall_s=wall, bytes=nbytes, report=report)
    last = " | ".join(tail) or "(no output)"
    if exited is None:
        error = f"timed out: no output line matched /{marker}/ within {timeout_s:g} s; last output: {last}"
    else:
        error = f"exited with code {exited} before any line matched /{marker}/; last output: {last}"
    return Outcome(pid=proc.pid, load_s=None, wall_s=wall, bytes=nbytes, error=error[-2000:],
                   report=report)


def _watch(fd: int, pattern: re.Pattern[bytes], deadline: float) -> tuple[str | None, deque[str]]:
    """Read lines until one matches (returned), the output ends, or the deadline passes."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    pending = b""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return None, tail
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's last writer closed it
            chunk = b""
        lines = re.split(rb"[\r\n]", pending + chunk)
        pending = lines.pop() if chunk else b""
        for line in lines:
            if line.strip():
                tail.append(line.decode(errors="replace").strip()[:300])
            if pattern.search(line):
                return line.decode(errors="replace").strip(), tail
        if not chunk:
            return None, tail


def _exit_code(proc: subprocess.Popen, deadline: float) -> int | None:
    """The command's own exit code once its output ended; None if it is still running at the deadline."""
    try:
        return proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        return None


def file_nbytes(path: str) -> int:
    """Tensor bytes when the file is a model the workbench reads, else its size."""
    try:
        from workbench.formats import open_index

        return open_index(path).nbytes
    except (WorkbenchError, ImportError):
        return os.path.getsize(path)


def measure_external(cmd: str, marker: str, file: str, *, runs: int = 5, cache: str = "cold",
                     timeout_s: float = 600.0, device: str = "host", label: str = "",
                     baseline: str | None = None, **options: Any) -> AttemptResult:
    """Time ``cmd`` ``runs`` times like any attempt: cache set per run, device lock, ledger.

    ``device`` names the device lock to hold (the one the engine loads onto); further keyword
    arguments (``ledger``, ``campaign``, ``hypothesis``, ``progress``, ``lock_dir``) go to the runner.
    """
    from workbench.measure.runner import measure_with

    compile_marker(marker)
    if not os.path.isfile(file):
        raise WorkbenchError(f"{file}: no such file (the model the command loads)")
    nbytes = file_nbytes(file)
    config = RunConfig(file=file, strategy="external", params={"cmd": cmd, "marker": marker},
                       device=device, label=label)

    def run_one(_config: RunConfig) -> Outcome:
        return time_external(cmd, marker, timeout_s=timeout_s, nbytes=nbytes)

    labels: Sequence[str] | None = [label] if label else None
    return measure_with(run_one, [config], runs=runs, cache=cache, labels=labels,
                        baseline=baseline, **options)[0]
