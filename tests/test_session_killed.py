"""A `workbench session` killed mid-turn (issue 19, class 4, for the long-session runner): the attempt
and the turns it finished stay in the ledger and read interrupted, and the session worker dies with its
runner — SIGKILL (the worker's parent-death signal) or SIGTERM (handled like Ctrl-C)."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import alive, cmdline, wait_for

from workbench.ledger import Ledger
from workbench.measure.lock.reaper import descendants


@pytest.fixture(scope="module")
def moe(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=64)


@pytest.fixture
def session(tmp_path, moe):
    """A long session started in its own CLI process; killed at the test's end whatever happened."""
    ledger = tmp_path / "l.sqlite"
    env = {**os.environ, "WORKBENCH_LOCK_DIR": str(tmp_path / "locks")}
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "session", moe.path, "--turns", "500",
                             "--tokens", "4", "--compute", "sleep:20", "--cache-mib", "1", "--ledger", str(ledger),
                             "--campaign", "killed", "--timeout", "300"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker: list[int] = []
    try:
        yield proc, ledger, worker
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in worker:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def turns_recorded(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT count(*) FROM turns").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is still being written
        return 0


def mid_turn(proc: subprocess.Popen, ledger: Path, worker: list[int]) -> None:
    """Wait until the session worker runs and two turns are in the ledger (so the kill lands mid-session)."""
    def found() -> bool:
        worker[:] = [p for p in descendants(proc.pid) if b"workbench.measure.session.worker" in cmdline(p)]
        return bool(worker)

    wait_for(found, 60, "no session worker started")
    wait_for(lambda: turns_recorded(ledger) >= 2, 120, "no turn recorded")


def the_attempt(ledger: Path) -> tuple[dict, int]:
    with Ledger(ledger, readonly=True) as led:
        attempts = led.attempts("killed")
        assert len(attempts) == 1, attempts
        attempt = led.attempt(attempts["id"][0])
        return attempt, len(led.turns(campaign="killed"))


def test_a_session_sigkilled_mid_turn_keeps_its_turns_and_leaves_no_worker(session):
    proc, ledger, worker = session
    mid_turn(proc, ledger, worker)
    proc.kill()
    proc.communicate(timeout=60)
    wait_for(lambda: not any(alive(p) for p in worker), 10, "the session worker outlived its runner")
    attempt, turns = the_attempt(ledger)
    assert (attempt["verdict"], attempt["verdict_reason"]) == ("failed", "interrupted"), attempt
    assert 2 <= turns < 500  # the finished turns stay, the session did not


def test_a_session_sigtermed_mid_turn_closes_like_ctrl_c(session):
    proc, ledger, worker = session
    mid_turn(proc, ledger, worker)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "interrupted" in err, err
    wait_for(lambda: not any(alive(p) for p in worker), 10, "the session worker outlived its runner")
    with sqlite3.connect(ledger) as db:  # written by the runner itself, not only read so
        rows = db.execute("SELECT verdict, verdict_reason FROM attempts").fetchall()
    assert rows == [("failed", "interrupted")]
    attempt, turns = the_attempt(ledger)
    assert 2 <= turns < 500
    assert f"interrupted: {turns}/500 turns recorded in {attempt['id'][:8]}" in err, err  # what was kept
