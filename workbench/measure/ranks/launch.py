"""Start the ranks of one run as torchrun does (fresh processes, env:// rendezvous on 127.0.0.1 and a
free port), watch them, and kill the rest the moment one fails: no rank is left waiting on a peer.

Each rank leads its own session and dies with this process (a parent-death signal); its stdout and
stderr go to unlinked temporary files, so a chatty rank never blocks on a full pipe.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import IO, Any, Mapping

from workbench.errors import WorkerFailed
from workbench.measure.lock.reaper import die_with_me
from workbench.records import RankReport

POLL_S = 0.01
SCRATCH_GLOB = "/dev/shm/workbench-ranks-{token}*"  # what a rank may leave behind if it is killed


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    out: IO[bytes]
    err: IO[bytes]

    def stderr_tail(self, n: int = 2000) -> str:
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace").strip()[-n:]

    def last_line(self) -> str:
        lines = self.stderr_tail().splitlines()
        return lines[-1] if lines else "(no stderr)"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_command() -> list[str]:
    return [sys.executable, "-m", "workbench.measure.ranks.worker", "-"]


def launch_ranks(config: Mapping[str, Any], world: int, timeout_s: float) -> tuple[list[RankReport], float]:
    """Run ``world`` ranks on ``config``; their reports (rank order) and the wall time, spawn → last exit.

    Raises
    ------
    WorkerFailed
        One line naming the first rank that failed (exit status or signal, its last stderr line), or
        the ranks still running at ``timeout_s``; every other rank is killed first.
    """
    token = f"{os.getpid()}-{uuid.uuid4().hex[:10]}"
    payload = json.dumps({**config, "token": token}).encode()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "PYTHONUNBUFFERED": "1"}
    ranks: list[_Rank] = []
    t0 = time.perf_counter()
    try:
        for r in range(world):
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            proc = subprocess.Popen(rank_command(), stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, start_new_session=True,
                                    preexec_fn=die_with_me())
            ranks.append(_Rank(r, proc, out, err))
            proc.stdin.write(payload)
            proc.stdin.close()
        _wait(ranks, t0 + timeout_s, timeout_s)
        wall = time.perf_counter() - t0
        return [_report(r, wall) for r in ranks], wall
    finally:
        for r in ranks:
            _kill(r.proc)
            r.out.close()
            r.err.close()
        for leftover in glob.glob(SCRATCH_GLOB.format(token=token)):
            with contextlib.suppress(OSError):
                os.unlink(leftover)


def _wait(ranks: list[_Rank], deadline: float, timeout_s: float) -> None:
    """Until every rank exited 0; the first that did not (or the deadline) ends the run."""
    while True:
        running = []
        for r in ranks:
            code = r.proc.poll()
            if code is None:
                running.append(r)
            elif code != 0:  # the run ends now: launch_ranks kills the rest on the way out
                raise WorkerFailed(rank_command(), code, r.stderr_tail(),
                                   f"rank {r.rank} of {len(ranks)} {_describe(code)}: {r.last_line()} "
                                   f"(the other ranks were killed)", pid=r.proc.pid,
                                   wall_s=time.perf_counter() - (deadline - timeout_s))
        if not running:
            return
        if time.perf_counter() > deadline:
            for r in ranks:
                _kill(r.proc)
            names = ", ".join(str(r.rank) for r in running)
            raise WorkerFailed(rank_command(), None, running[0].stderr_tail(),
                               f"ranks timed out after {timeout_s:g} s (killed); still running: "
                               f"rank{'s' if len(running) > 1 else ''} {names}",
                               pid=running[0].proc.pid, wall_s=timeout_s)
        time.sleep(POLL_S)


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit {code}"


def _report(r: _Rank, wall: float) -> RankReport:
    r.out.seek(0)
    lines = [ln for ln in r.out.read().decode("utf-8", "replace").splitlines() if ln.startswith("{")]
    try:
        return RankReport.from_json(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        raise WorkerFailed(rank_command(), 0, r.stderr_tail(), f"rank {r.rank} exit 0 without a report ({exc!r}): "
                                                               f"{r.last_line()}", pid=r.proc.pid, wall_s=wall) from None


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL a rank's whole session and reap it (nothing when it already exited and was reaped)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
