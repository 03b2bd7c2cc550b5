"""Run one fresh worker process and turn what it said (or how it died) into an :class:`Outcome`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from workbench.measure.records import RunConfig

STDERR_TAIL = 2000  # characters of a failed worker's stderr kept in the run record


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
    result: Mapping[str, Any] = field(default_factory=dict)


def worker_command() -> list[str]:
    """argv of a fresh worker reading its config from stdin."""
    return [sys.executable, "-m", "workbench.worker", "-"]


def run_worker(config: RunConfig, *, verify: bool = True, timeout_s: float = 600.0) -> Outcome:
    """Spawn ``python -m workbench.worker`` for ``config``; wall time is spawn → exit as seen here."""
    cmd = worker_command()
    payload = {**config.to_json(), "verify": verify}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    payload["spawn_monotonic"] = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True, text=True)
    try:
        out, err = proc.communicate(json.dumps(payload), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return _failed(proc.pid, time.perf_counter() - t0,
                       f"worker timed out after {timeout_s:g} s; stderr: {_tail(err)}")
    except BaseException:  # Ctrl-C: the worker has its own session, so it must be killed here
        _kill_group(proc)
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return _failed(proc.pid, wall, _describe_exit(proc.returncode, err))
    try:
        data = _last_json(out)
    except ValueError as exc:
        return _failed(proc.pid, wall, f"worker printed no JSON result ({exc}); stderr: {_tail(err)}")
    return outcome_from_json(data, proc.pid, wall)


def outcome_from_json(data: Mapping[str, Any], pid: int, wall_s: float) -> Outcome:
    """The :class:`Outcome` of a worker's JSON result."""
    result = data.get("result") or {}
    return Outcome(
        pid=int(data.get("pid") or pid),
        load_s=float(data["load_s"]),
        wall_s=wall_s,
        bytes=int(result.get("bytes", 0)),
        verified=data.get("verified"),
        engaged=tuple(e.get("text", str(e)) if isinstance(e, dict) else str(e)
                      for e in result.get("engaged", ())),
        phases={k: float(v) for k, v in (result.get("phases") or {}).items()},
        minflt=int(result.get("minflt", 0)),
        majflt=int(result.get("majflt", 0)),
        result=dict(data),
    )


def _failed(pid: int | None, wall_s: float, error: str) -> Outcome:
    return Outcome(pid=pid, load_s=None, wall_s=wall_s, error=error)


def _describe_exit(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"worker killed by {name}; stderr: {_tail(stderr)}"
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


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the process and anything it started (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
