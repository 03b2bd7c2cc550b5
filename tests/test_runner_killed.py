"""Issue 19, class 4: a runner killed before an attempt's first run finishes keeps the attempt (it reads
interrupted) and leaves no process behind — SIGKILL or SIGTERM, a hung worker or an external engine
whose children left its session (``setsid``) or process group."""
from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import alive, cmdline, wait_for

from workbench.ledger import Ledger
from workbench.measure.engine.external import time_external
from workbench.measure.lock.reaper import descendants

ENGINE = """
import os, sys, time
out = sys.argv[1]
def note(name):
    with open(f"{out}.{name}.tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(f"{out}.{name}.tmp", f"{out}.{name}")
if os.fork() == 0:  # a daemon: its own session, then a second fork so that nothing waits for it
    os.setsid()
    if os.fork() == 0:
        note("daemon")
        time.sleep(300)
    os._exit(0)
if os.fork() == 0:  # a child in a process group of its own
    os.setpgid(0, 0)
    note("pgid")
    time.sleep(300)
    os._exit(0)
while not (os.path.exists(out + ".daemon") and os.path.exists(out + ".pgid")):
    time.sleep(0.01)
note("engine")
if len(sys.argv) > 2:
    print("engine ready", flush=True)
time.sleep(300)
"""
NAMES = ("engine", "daemon", "pgid")


def _stat(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:4].__repr__()
    except OSError:
        return "gone"


def pids_of(out: Path) -> dict[str, int]:
    wait_for(lambda: all(Path(f"{out}.{n}").exists() for n in NAMES), 60, "the engine's processes never started")
    return {n: int(Path(f"{out}.{n}").read_text()) for n in NAMES}


def all_gone(pids: dict[str, int]) -> None:
    try:
        wait_for(lambda: not any(alive(p) for p in pids.values()), 20,
                 lambda: f"still running: {[(n, _stat(p)) for n, p in pids.items() if alive(p)]}")
    finally:
        for pid in pids.values():  # never leave them to the rest of the suite
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert not [n for n, p in pids.items() if alive(p)]


@pytest.fixture
def engine(tmp_path) -> Path:
    path = tmp_path / "engine.py"
    path.write_text(ENGINE)
    return path


def test_after_the_marker_nothing_the_engine_started_lives_on(tmp_path, engine):
    out = tmp_path / "pids"
    result = time_external(f"{shlex.quote(sys.executable)} {engine} {out} ready", "engine ready", timeout_s=60)
    assert result.error is None and result.load_s is not None
    all_gone(pids_of(out))


def test_after_a_timeout_nothing_the_engine_started_lives_on(tmp_path, engine):
    out = tmp_path / "pids"
    result = time_external(f"{shlex.quote(sys.executable)} {engine} {out}", "engine ready", timeout_s=8)
    assert result.load_s is None and "timed out" in result.error
    all_gone(pids_of(out))


@pytest.fixture
def model(tmp_path) -> Path:
    from workbench.formats.synth import write_synthetic

    path = tmp_path / "m.gguf"
    write_synthetic(path, format="gguf", layout="dense", size=256 << 10)
    return path


@pytest.fixture
def started():
    """The CLI processes a test starts, killed at its end whatever happened."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def cli(tmp_path: Path, args: list[str], started: list, **env: str) -> subprocess.Popen:
    full = {**os.environ, "WORKBENCH_LOCK_DIR": str(tmp_path / "locks"), **env}
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", *args], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started.append(proc)
    return proc


def external_cli(tmp_path: Path, engine: Path, model: Path, out: Path, started: list) -> subprocess.Popen:
    return cli(tmp_path, ["external", "--cmd", f"{sys.executable} {engine} {out}", "--marker", "engine ready",
                          "--file", str(model), "--runs", "2", "--cache", "asis", "--device", "host",
                          "--timeout", "120", "--ledger", str(tmp_path / "l.sqlite")], started)


def the_attempt(ledger: Path) -> dict:
    with Ledger(ledger, readonly=True) as led:
        attempts = led.attempts()
        assert len(attempts) == 1, attempts
        return led.attempt(attempts["id"][0])


def test_a_runner_sigkilled_during_the_first_run_keeps_the_attempt_and_leaves_no_engine(tmp_path, engine, model,
                                                                                      started):
    out = tmp_path / "pids"
    proc = external_cli(tmp_path, engine, model, out, started)
    pids = pids_of(out)
    proc.kill()
    proc.communicate(timeout=60)
    all_gone(pids)
    attempt = the_attempt(tmp_path / "l.sqlite")  # opened before its first run, its runner now gone
    assert (attempt["verdict"], attempt["verdict_reason"], attempt["n"]) == ("failed", "interrupted", 0)


def test_a_runner_sigtermed_closes_the_attempt_like_ctrl_c(tmp_path, engine, model, started):
    out = tmp_path / "pids"
    proc = external_cli(tmp_path, engine, model, out, started)
    pids = pids_of(out)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    all_gone(pids)
    assert proc.returncode == 128 + signal.SIGTERM and "interrupted" in err, err
    row = sqlite3.connect(tmp_path / "l.sqlite").execute("SELECT verdict, verdict_reason FROM attempts").fetchall()
    assert row == [("failed", "interrupted")]  # written by the runner itself, not only read so


def test_a_hung_worker_dies_with_its_sigkilled_runner(tmp_path, model, started):
    proc = cli(tmp_path, ["run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "asis",
                          "--timeout", "300", "--ledger", str(tmp_path / "l.sqlite")],
               started, WORKBENCH_TEST_FAULT=json.dumps({"*": "hang"}))

    def worker() -> list[int]:
        return [p for p in descendants(proc.pid)
                if b"workbench.measure.run.worker" in cmdline(p)]

    wait_for(lambda: bool(worker()), 60, "no worker started")
    hung = worker()
    time.sleep(1.0)  # into its load, where the fault hangs it
    proc.kill()
    proc.communicate(timeout=60)
    try:
        wait_for(lambda: not any(alive(p) for p in hung), 10, "the worker outlived its runner")
    finally:
        for pid in hung:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    attempt = the_attempt(tmp_path / "l.sqlite")
    assert (attempt["verdict"], attempt["verdict_reason"]) == ("failed", "interrupted")
