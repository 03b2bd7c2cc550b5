"""Run one fresh worker process and turn what it said (or how it died) into an :class:`Outcome`."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from workbench.errors import WorkerFailed
from workbench.measure.lock.reaper import die_with_me
from workbench.records import RunConfig, WorkerReport

STDERR_TAIL = 2000  # characters of a failed worker's stderr kept in the run record
DUMP_GRACE_S = 0.5  # how long a worker past its timeout gets to print its threads' stacks (SIGUSR1)


@dataclass(frozen=True)
class Outcome:
    """What one run produced, before the runner adds position, cache state and lock wait."""

    pid: int | None
    load_s: float | None
    wall_s: float | None
    bytes: int = 0
    verified: bool | None = None
    engaged: tuple[str, ...] = ()
    phases: Mapping[str, float] = field(default_factory=dict)
    minflt: int = 0
    majflt: int = 0
    error: str | None = None
    report: WorkerReport = field(default_factory=WorkerReport)


def worker_command() -> list[str]:
    """argv of a fresh worker reading its config from stdin."""
    return [sys.executable, "-m", "workbench.measure.run.worker", "-"]


def run_worker(config: RunConfig, *, verify: bool = True, timeout_s: float = 600.0,
               cache: Mapping[str, Any] | None = None,
               identity_of: Callable[[str], Mapping[str, Any]] | None = None) -> Outcome:
    """Spawn ``python -m workbench.measure.run.worker`` for ``config``; wall time is spawn → exit as seen here.
    The worker dies with this process (a parent-death signal): a runner killed mid-run leaves no worker.
    ``cache``: the page-cache state the runner set (:func:`workbench.measure.run.model.cache_request`), which
    the worker holds once more just before its window. ``identity_of(path)``: the identity the run's attempt
    recorded (:meth:`workbench.measure.run.model.Models.identity`), whose file hashes the worker verifies against.

    Raises
    ------
    WorkerFailed
        When the worker exits non-zero, is killed, runs past ``timeout_s`` (then it is killed) or
        prints no report; the runner records that as the run's error.
    """
    cmd = worker_command()
    payload = {**config.to_json(), "verify": verify, "files": model_files(config.file)}
    if cache is not None:
        payload["cache"] = dict(cache)
    if identity_of is not None and verify:
        payload["identity"] = expected_hashes(identity_of(config.file))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    payload["spawn_monotonic"] = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True, text=True, preexec_fn=die_with_me())
    try:
        out, err = proc.communicate(json.dumps(payload), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        err = _stacks_then_kill(proc)
        raise WorkerFailed(cmd, None, err, f"worker timed out after {timeout_s:g} s (killed); stderr: {_tail(err)}",
                           pid=proc.pid, wall_s=time.perf_counter() - t0) from None
    except BaseException:  # Ctrl-C: the worker has its own session, so it must be killed here
        kill_group(proc)
        raise
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise WorkerFailed(cmd, proc.returncode, err, _describe_exit(proc.returncode, err), pid=proc.pid, wall_s=wall)
    try:
        return outcome_from_json(_last_json(out), proc.pid, wall)
    except (ValueError, KeyError, TypeError) as exc:
        raise WorkerFailed(cmd, 0, err, f"worker exit 0 without a result: printed no JSON result ({exc}); "
                                        f"stderr: {_tail(err)}", pid=proc.pid, wall_s=wall) from None


def expected_hashes(identity: Mapping[str, Any]) -> dict[str, str]:
    """Each file's hash by its real path, from an identity as an attempt records it ({} for none)."""
    from workbench.measure.run.model import identity_members

    return {os.path.realpath(str(m["read"])): str(m["hash"]) for m in identity_members(identity) if m.get("hash")}


def model_files(path: str) -> list[str]:
    """The member files of the model at ``path`` (resolved here, so the worker reads no index before its
    window); ``[]`` when it does not resolve — the worker's own load then says why."""
    from workbench.errors import WorkbenchError
    from workbench.formats.resolve import resolve_model

    try:
        return list(resolve_model(path).files)
    except (OSError, WorkbenchError):
        return []


def _stacks_then_kill(proc: subprocess.Popen) -> str:
    """Ask a worker past its timeout for its threads' stacks (SIGUSR1, see the worker), then kill its
    process group; returns all of its stderr (communicate() keeps what it read before a timeout)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGUSR1)
    try:
        _, err = proc.communicate(timeout=DUMP_GRACE_S)  # it may have died of the signal: done
        kill_group(proc)  # whatever it started dies with it
        return err
    except subprocess.TimeoutExpired:
        kill_group(proc)
    _, err = proc.communicate()
    return err


def outcome_from_json(data: Mapping[str, Any], pid: int, wall_s: float) -> Outcome:
    """The :class:`Outcome` of a worker's JSON result (a :class:`WorkerReport`)."""
    report = WorkerReport.from_json(data)
    load = report.load
    if load is None or report.load_s is None:
        raise ValueError("the JSON object is no worker report (no load result)")
    return Outcome(
        pid=report.pid or pid, load_s=report.load_s, wall_s=wall_s, bytes=load.bytes,
        verified=report.verified, engaged=tuple(str(e) for e in load.engaged), phases=dict(load.phases),
        minflt=load.minflt, majflt=load.majflt, report=report,
    )


def _describe_exit(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"worker killed by {name} (exit status {returncode}); stderr: {_tail(stderr)}"
    return f"worker exit {returncode}: {_tail(stderr)}"


def _tail(text: str | None) -> str:
    text = (text or "").strip()
    if not text:
        return "(no stderr)"
    return text if len(text) <= STDERR_TAIL else "…" + text[-STDERR_TAIL:]


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("empty stdout" if not stdout.strip() else "no JSON object line")


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process that leads its own session and everything it started, then reap it (a worker
    past its time, or an external engine once its marker line appeared)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
