"""Sweeps over faults: a point whose workers crash and a point whose kernel dies leave the sweep going;
a sweep whose runner (the point's kernel) is SIGKILLed mid-attempt resumes by redoing that point only.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.ledger import Ledger

PARAMS = 'x = 0\nmodel = ""\nlocks = ""\ngate = ""\ndie_at = -1\ncampaign = "none"\nledger_path = ""\n'
BODY = """
import os, pathlib, signal, time
from workbench.measure import RunConfig, measure

if x == die_at:  # the kernel itself dies (as an OOM kill would take it)
    os.kill(os.getpid(), signal.SIGKILL)

def hold(done, total, config, run):  # point 2 stops after its first recorded run until the gate opens
    if gate and x == 2 and done == 1:
        pathlib.Path(gate + ".pid").write_text(str(os.getpid()))
        while not os.path.exists(gate):
            time.sleep(0.05)

measure([RunConfig(model, "pread", label=f"p{x}")], runs=2, cache="asis", ledger=ledger_path,
        campaign=campaign, lock_dir=locks, progress=hold)
"""


@pytest.fixture()
def space(tmp_path: Path, isolated_cache: Path) -> dict[str, Path]:
    from workbench.formats.synth import write_synthetic

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(BODY)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "points.ipynb")
    model = tmp_path / "m.safetensors"
    write_synthetic(model, format="safetensors", layout="dense", size=256 << 10, seed=9)
    return {"root": tmp_path, "nb": tmp_path / "points.ipynb", "model": model, "ledger": tmp_path / "l.sqlite",
            "out": tmp_path / "runs", "gate": tmp_path / "gate", "locks": tmp_path / "locks"}


def write_sweep(space: dict[str, Path], xs: list[int], **fixed: object) -> Path:
    doc = {"notebook": str(space["nb"]), "campaign": "faults",
           "parameters": {"model": str(space["model"]), "locks": str(space["locks"]), **fixed}, "grid": {"x": xs}}
    path = space["root"] / "sweep.yaml"
    path.write_text(json.dumps(doc))
    return path


def attempts(space: dict[str, Path]) -> dict[str, list[dict]]:
    with Ledger(space["ledger"]) as ledger:
        rows = ledger.attempts("faults").to_dict("records")
        for row in rows:
            row["n_runs"] = len(ledger.runs(row["id"]))
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["label"], []).append(row)
    return out


def sweep_args(space: dict[str, Path], path: Path) -> list[str]:
    return ["sweep", str(path), "--ledger", str(space["ledger"]), "--out", str(space["out"])]


def test_crashing_workers_and_a_dead_kernel_leave_the_sweep_going(space):
    path = write_sweep(space, [1, 2, 3], die_at=2)
    with defaults.set_injected_fault(json.dumps({"p1": "segfault"})):
        result = CliRunner().invoke(main, sweep_args(space, path))
    assert result.exit_code == 3, result.output  # one point failed; the others ran
    assert "FAILED RUNS: 3/5 runs recorded by this sweep did not finish and verify (3 failed); 1/3 points failed" in result.output
    assert "2 done, 0 skipped (resumed), 1 failed" in result.output
    found = attempts(space)
    (p1,) = found["p1"]  # its workers crashed: a finished, failed attempt with both runs
    assert p1["verdict"] == "failed" and p1["n_failed"] == 2 and p1["n_runs"] == 2
    assert "worker killed by SIGSEGV" in p1["notes"]
    (p3,) = found["p3"]
    assert p3["verdict"] == "baseline" and p3["n"] == 2
    (dead,) = [rows[0] for label, rows in found.items() if "x=2" in label]  # the sweep recorded the point
    assert dead["verdict"] == "failed" and "DeadKernelError" in dead["notes"]


def test_a_sweep_killed_mid_attempt_resumes_by_redoing_only_that_point(space):
    path = write_sweep(space, [1, 2], gate=str(space["gate"]))
    cmd = [sys.executable, "-m", "workbench.cli", *sweep_args(space, path)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pid_file = Path(f"{space['gate']}.pid")
    try:
        deadline = time.time() + 180
        while not pid_file.exists():  # point 1 done, point 2 has recorded its first of two runs
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "the sweep never reached point 2"
            time.sleep(0.1)
        kernel = int(pid_file.read_text())
    finally:  # everything at once, as a power cut or the OOM killer would: no handler runs anywhere
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    os.kill(kernel, signal.SIGKILL)
    conn = sqlite3.connect(str(space["ledger"]))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    deadline = time.time() + 30
    while Path(f"/proc/{kernel}").exists() and time.time() < deadline:  # until its zombie is reaped
        time.sleep(0.05)
    found = attempts(space)
    (p1,) = found["p1"]
    assert p1["verdict"] == "baseline" and p1["n"] == 2 and p1["n_runs"] == 2  # intact
    (cut,) = found["p2"]
    assert cut["verdict"] == "failed" and cut["verdict_reason"] == "interrupted" and cut["n_runs"] == 1
    space["gate"].touch()
    result = CliRunner().invoke(main, sweep_args(space, path) + ["--resume"])
    assert result.exit_code == 0, result.output
    assert "1 done, 1 skipped (resumed), 0 failed" in result.output
    found = attempts(space)
    assert len(found["p1"]) == 1  # not measured again
    assert sorted(a["verdict"] for a in found["p2"]) == ["baseline", "failed"]  # redone; the cut one kept
