"""The runner killed mid-attempt, and ledger writes that fail (full disk, locked past the busy timeout,
read-only directory): the database stays sound, earlier attempts stay intact, the interrupted attempt
reads as failed (interrupted), and every number measured is printed and saved.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from workbench.settings import defaults
from workbench.ledger import Ledger

CHILD = Path(__file__).with_name("runner_fault_child.py")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from workbench.formats.synth import write_synthetic

    path = tmp_path_factory.mktemp("ledger-faults") / "dense.gguf"
    write_synthetic(path, format="gguf", layout="dense", size=256 << 10, seed=7)
    return str(path)


def integrity(path: Path) -> str:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def raw_verdicts(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(str(path))
    try:
        return dict(conn.execute("SELECT c.name, a.verdict FROM attempts a JOIN campaigns c ON c.id = a.campaign_id"))
    finally:
        conn.close()


def run_child(how: str, model: str, ledger: Path, locks: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHILD), how, model, str(ledger), str(locks)],
                          capture_output=True, text=True, timeout=300)


def check_earlier_intact(ledger: Path, earlier: str | None = None) -> None:
    with Ledger(ledger) as led:
        (row,) = led.attempts("earlier").to_dict("records")
        assert row["verdict"] == "baseline" and row["n"] == 1 and row["n_failed"] == 0
        assert earlier is None or row["id"] == earlier
        assert len(led.runs(row["id"])) == 1


def test_a_runner_killed_mid_attempt_leaves_a_sound_ledger_and_an_interrupted_attempt(model, tmp_path,
                                                                                       isolated_cache):
    ledger = tmp_path / "l.sqlite"
    proc = run_child("kill", model, ledger, tmp_path / "locks")
    assert proc.returncode == -9, proc.stderr
    assert integrity(ledger) == "ok"
    assert raw_verdicts(ledger) == {"earlier": "baseline", "disturbed": "running"}  # as the kill left it
    check_earlier_intact(ledger)
    with Ledger(ledger) as led:  # a reader finds its runner gone: failed (interrupted), runs kept
        (cut,) = led.attempts("disturbed").to_dict("records")
        assert cut["verdict"] == "failed" and cut["auto_verdict"] == "failed"
        assert cut["verdict_reason"] == "interrupted" and "interrupted: its runner (pid" in cut["notes"]
        assert cut["n"] == 1 and cut["n_failed"] == 0 and len(led.runs(cut["id"])) == 1
        assert led.reap_abandoned() == []  # once
    from click.testing import CliRunner

    from workbench.cli import main

    listed = CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "list"])
    assert listed.exit_code == 0 and "running" not in listed.output and "failed" in listed.output


def test_a_live_runner_is_never_reaped_nor_one_on_another_host(tmp_path):
    from workbench.ledger.owner import ALIVE, GONE, UNKNOWN, Owner, current_owner, owner_state
    from workbench.records import RunConfig

    me = current_owner()
    assert owner_state(me) == ALIVE
    assert owner_state(Owner(me.host, me.boot_id, me.pid_ns, me.pid, me.start_ticks + 1)) == GONE  # pid reused
    assert owner_state(Owner("elsewhere", me.boot_id, me.pid_ns, 1, 1)) == UNKNOWN
    assert owner_state(Owner(me.host, me.boot_id, "pid:[1]", 1, 1)) == UNKNOWN  # another container
    assert owner_state(Owner(me.host, "an-earlier-boot", me.pid_ns, me.pid, me.start_ticks)) == GONE
    assert owner_state(None) == UNKNOWN  # a ledger written before owners were recorded
    with Ledger(tmp_path / "l.sqlite") as led:
        live = led.start_attempt(campaign="c", config=RunConfig("f", "pread"), cache="cold")
        assert led.attempt(live)["environment"]["runner"]["pid"] == os.getpid()
        assert led.reap_abandoned() == [] and led.attempt(live)["verdict"] == "running"


def test_a_full_disk_mid_measurement_keeps_every_number(model, tmp_path, isolated_cache):
    """RLIMIT_FSIZE in a child: every ledger write past the write-ahead log's size fails (EFBIG)."""
    ledger = tmp_path / "l.sqlite"
    proc = run_child("fsize", model, ledger, tmp_path / "locks")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] and "a ledger write failed mid-measurement" in out["error"]
    assert "database or disk is full" in out["error"] or "disk I/O error" in out["error"]
    assert "2 of 3 runs not recorded" in out["error"]
    (attempt,) = out["results"]
    assert attempt["n"] == 3 and attempt["recorded"] == "part"  # all three measured, in memory
    assert all(r["load_s"] > 0 for r in attempt["runs"])
    if out["dump"] is not None:  # the dump fits under the limit where the ledger's log did not grow
        dumped = json.loads(Path(out["dump"]).read_text())
        assert [r["load_s"] for r in dumped["attempts"][0]["runs"]] == [r["load_s"] for r in attempt["runs"]]
    assert integrity(ledger) == "ok"
    check_earlier_intact(ledger, out["earlier"])
    with Ledger(ledger) as led:
        (cut,) = led.attempts("disturbed").to_dict("records")
        assert cut["verdict"] == "failed" and len(led.runs(cut["id"])) == 1  # what was written stays


@contextlib.contextmanager
def cli_compare(model: str, ledger: Path, locks: Path, gate: Path,
                *extra_env: tuple[str, str]) -> Iterator[subprocess.Popen]:
    """``workbench compare`` of a (pread) and b (mmap), 2 runs each: b's first run pauses at ``gate``."""
    env = {**os.environ, defaults.TEST_FAULT: json.dumps({"b": {"fault": "pause", "until": str(gate)}}),
           defaults.LOCK_DIR: str(locks), **dict(extra_env)}
    cmd = [sys.executable, "-m", "workbench.cli", "compare", model, "--strategy", "pread", "--strategy", "mmap",
           "--label", "a", "--label", "b", "--runs", "2", "--cache", "asis", "--ledger", str(ledger)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for_runs(ledger: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(sqlite3.Error):
            conn = sqlite3.connect(str(ledger))
            try:
                if conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] >= n:
                    return
            finally:
                conn.close()
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first run never reached the ledger"
        time.sleep(0.02)


def earlier_attempt(model: str, ledger: Path, locks: Path) -> None:
    from workbench.measure import RunConfig, measure

    with Ledger(ledger) as led:
        measure([RunConfig(model, "pread")], runs=1, cache="asis", ledger=led, campaign="earlier", lock_dir=locks)


def check_cli_kept_the_numbers(proc: subprocess.Popen, needle: str) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    errors = [line for line in err.splitlines() if line.startswith("workbench: error:")]
    assert len(errors) == 1 and needle in errors[0], err
    assert "3 of 4 runs not recorded" in errors[0]
    # the table still printed, b's row with it: its attempt was opened before its first run (issue 19),
    # its runs never reached the ledger
    assert "NOT all recorded" in out and any(line.split()[1:2] == ["b"] for line in out.splitlines()), out
    dump = errors[0].rsplit("saved to ", 1)[1]
    dumped = json.loads(Path(dump).read_text())
    assert [a["label"] for a in dumped["attempts"]] == ["a", "b"]
    assert all(len(a["runs"]) == 2 and all(r["load_s"] for r in a["runs"]) for a in dumped["attempts"])
    # a: its first run recorded; b: its attempt opened before its first run (issue 19) if the ledger still
    # took writes then, none of its runs
    assert [a["recorded"] for a in dumped["attempts"]][0] == "part"
    assert dumped["attempts"][1]["recorded"] in ("part", "none")
    return dump


def mount_or_skip(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} not permitted here: {proc.stderr.strip()}")


def test_a_full_disk_seen_through_the_cli_prints_the_table_and_one_error(model, tmp_path, isolated_cache):
    """A real ENOSPC: the ledger on a small tmpfs that fills up between two runs."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount_or_skip("-t", "tmpfs", "-o", "size=4m", "wb-test-full", str(disk))
    try:
        ledger, gate, locks = disk / "l.sqlite", tmp_path / "gate", tmp_path / "locks"
        earlier_attempt(model, ledger, locks)
        with cli_compare(model, ledger, locks, gate) as proc:
            wait_for_runs(ledger, 2, proc)  # the earlier run and a's first
            fill(disk / "filler")
            gate.touch()
            dump = check_cli_kept_the_numbers(proc, "database or disk is full")
        assert not dump.startswith(str(disk))  # the full disk could not take it; the temp dir did
        os.unlink(disk / "filler")
        assert integrity(ledger) == "ok"
        check_earlier_intact(ledger)
        with Ledger(ledger) as led:  # the CLI is gone: its unfinished attempts read interrupted
            a, *b = led.attempts("default").to_dict("records")  # b: opened before its first run, or never
            assert a["label"] == "a" and a["verdict"] == "failed" and a["verdict_reason"] == "interrupted"
            assert len(led.runs(a["id"])) == 1
            assert all(x["label"] == "b" and x["verdict"] == "failed" and not len(led.runs(x["id"])) for x in b)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def fill(path: Path) -> None:
    with open(path, "wb") as fh:
        block = b"\0" * (64 << 10)
        try:
            while True:
                fh.write(block)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_ledger_locked_past_the_busy_timeout_prints_the_table_and_one_error(model, tmp_path, isolated_cache):
    ledger, gate, locks = tmp_path / "l.sqlite", tmp_path / "gate", tmp_path / "locks"
    earlier_attempt(model, ledger, locks)
    with cli_compare(model, ledger, locks, gate, (defaults.LEDGER_BUSY_TIMEOUT, "0.5")) as proc:
        wait_for_runs(ledger, 2, proc)
        holder = sqlite3.connect(str(ledger), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another writer that never lets go
        try:
            gate.touch()
            t0 = time.monotonic()
            check_cli_kept_the_numbers(proc, "database is locked")
            assert time.monotonic() - t0 < 60  # the timeout held, not 60 s per write
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    assert integrity(ledger) == "ok"
    check_earlier_intact(ledger)
    with Ledger(ledger) as led:
        a, *b = led.attempts("default").to_dict("records")
        assert a["label"] == "a" and a["verdict"] == "failed" and len(led.runs(a["id"])) == 1
        assert all(x["label"] == "b" and x["verdict"] == "failed" and not len(led.runs(x["id"])) for x in b)


def test_busy_timeout_setting_is_checked():
    from workbench.errors import ParamError

    with defaults.set_ledger_busy_timeout(2.5):
        assert defaults.ledger_busy_timeout() == 2.5
    assert defaults.ledger_busy_timeout() == 60.0
    for bad in ("0", "-1", "soon", "inf"):
        with defaults._setenv(defaults.LEDGER_BUSY_TIMEOUT, bad), pytest.raises(ParamError):
            defaults.ledger_busy_timeout()


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` read-only: a read-only bind mount over itself as root (root ignores modes), else
    its mode bits."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    mount_or_skip("--bind", "-o", "ro", str(directory), str(directory))
    try:
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=False)


def test_a_read_only_ledger_directory_is_one_line_before_anything_runs(model, tmp_path, isolated_cache):
    from click.testing import CliRunner

    from workbench.cli import main

    home = tmp_path / "ro"
    home.mkdir()
    ledger = home / "l.sqlite"
    earlier_attempt(model, ledger, tmp_path / "locks")
    before = ledger.read_bytes()
    with read_only(home), defaults.set_lock_dir(tmp_path / "locks"):
        result = CliRunner().invoke(main, ["run", model, "--strategy", "mmap", "--runs", "2", "--cache", "asis",
                                           "--ledger", str(ledger)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("workbench: error:")]
    assert str(ledger) in line and f"the ledger's directory {home} is read-only" in line
    assert "median" not in result.output  # nothing was measured: nothing to lose
    assert ledger.read_bytes() == before and integrity(ledger) == "ok"
    check_earlier_intact(ledger)
