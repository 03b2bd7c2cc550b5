"""``workbench sweep``: parsing, the grid, papermill execution, failures, resume and dry run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import SweepError
from workbench.cli.sweep.execute import expand_grid, load_sweep, point_completed

PARAMS = 'x = 0\nfail_on = -1\ngate = ""\nmarks = ""\ncampaign = "none"\nledger_path = ""\n'
BODY = """
import json, os, pathlib, time
if gate and x == 2:  # the point the interrupt test catches in the middle
    pathlib.Path(gate + ".pid").write_text(str(os.getpid()))  # the kernel waiting here
    deadline = time.time() + 120
    while not os.path.exists(gate):
        if time.time() > deadline:
            raise TimeoutError("gate never opened")
        time.sleep(0.05)
if x == fail_on:
    raise RuntimeError(f"point {x} fails on purpose")
pathlib.Path(marks, f"ran-{x}-{os.getpid()}").write_text(json.dumps({"campaign": campaign, "ledger": ledger_path}))
"""


def write_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(BODY)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture()
def space(tmp_path: Path) -> dict[str, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    return {"root": tmp_path, "nb": write_notebook(tmp_path / "tiny.ipynb"), "marks": marks,
            "ledger": tmp_path / "ledger.sqlite", "out": tmp_path / "runs"}


def write_sweep(space: dict[str, Path], grid: dict, **fixed) -> Path:
    doc = {"notebook": str(space["nb"]), "campaign": "t-sweep",
           "parameters": {"marks": str(space["marks"]), **fixed}, "grid": grid}
    path = space["root"] / "sweep.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def ran(space: dict[str, Path]) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in space["marks"].iterdir())


def wait_until_gone(pid: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:  # gone, or a zombie nobody has reaped yet (its code no longer runs)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"the interrupted point's kernel (pid {pid}) outlived the sweep by {timeout:.0f} s")


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("text, needle", [
    ("notebook: [unclosed", "not valid YAML"),
    ("- a list", "a sweep file is a mapping"),
    ("notebook: tiny.ipynb\ncampaign: c\ngrdi: {x: [1]}", "unknown key(s) grdi"),
    ("notebook: tiny.ipynb\ncampaign: c\ngrid: {x: 3}", "grid 'x' must be a non-empty list"),
    ("notebook: tiny.ipynb\ncampaign: ''", "'campaign' must be a non-empty string"),
    ("notebook: nowhere.ipynb\ncampaign: c", "notebook 'nowhere.ipynb' not found"),
    ("notebook: tiny.ipynb\ncampaign: c\nparameters: {x: 1}\ngrid: {x: [1]}", "both fixed and in the grid"),
])
def test_malformed_sweep_is_one_line_exit_2(space, text, needle):
    bad = space["root"] / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SweepError) as err:
        load_sweep(bad)
    assert needle in str(err.value) and str(bad) in str(err.value)
    result = CliRunner().invoke(main, ["sweep", str(bad)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and needle in result.output


def test_grid_is_cartesian_and_names_are_stable(space):
    sweep = load_sweep(write_sweep(space, {"x": [1, 2], "cache": ["cold", "warm"]}))
    points = expand_grid(sweep)
    assert [dict(p.grid_values) for p in points] == [
        {"x": 1, "cache": "cold"}, {"x": 1, "cache": "warm"}, {"x": 2, "cache": "cold"}, {"x": 2, "cache": "warm"}]
    assert len({p.name for p in points}) == 4
    assert all(p.params["marks"] == str(space["marks"]) for p in points)
    # Reordering the grid's values keeps each point's name: resume finds finished points again.
    again = load_sweep(write_sweep(space, {"x": [2, 1], "cache": ["cold", "warm"]}))
    by_values = {json.dumps(dict(p.grid_values), sort_keys=True): p.name for p in expand_grid(again)}
    assert all(by_values[json.dumps(dict(p.grid_values), sort_keys=True)] == p.name for p in points)


def test_dry_run_lists_points_and_runs_nothing(space):
    path = write_sweep(space, {"x": [1, 2, 3]})
    result = cli("sweep", str(path), "--dry-run", "--out", str(space["out"]))
    assert result.exit_code == 0
    assert result.output.count("tiny-x=") == 3 and "3 points" in result.output
    assert ran(space) == [] and not space["out"].exists()


def test_two_point_sweep_runs_each_point_with_campaign_and_ledger(space):
    path = write_sweep(space, {"x": [1, 2]})
    result = cli("sweep", str(path), "--ledger", str(space["ledger"]), "--out", str(space["out"]))
    assert result.exit_code == 0, result.output
    assert "2 done, 0 skipped (resumed), 0 failed" in result.output
    assert ran(space) == [1, 2]
    outputs = sorted(space["out"].glob("*.ipynb"))
    assert len(outputs) == 2 and all(point_completed(p) for p in outputs)
    seen = json.loads(next(space["marks"].iterdir()).read_text())
    assert seen == {"campaign": "t-sweep", "ledger": str(space["ledger"].resolve())}


def test_failing_point_is_recorded_and_the_sweep_goes_on(space):
    from workbench.ledger import Ledger

    path = write_sweep(space, {"x": [1, 2, 3]}, fail_on=2)
    result = CliRunner().invoke(main, ["sweep", str(path), "--ledger", str(space["ledger"]), "--out", str(space["out"])])
    assert result.exit_code == 3  # documented: a point or run failed
    assert "2 done, 0 skipped (resumed), 1 failed" in result.output
    assert "1/3 points failed" in result.output
    assert ran(space) == [1, 3]
    failed = [p for p in space["out"].glob("*.ipynb") if not point_completed(p)]
    assert len(failed) == 1 and "x=2" in failed[0].name  # the failed point's notebook is kept
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts(campaign="t-sweep")
        runs = ledger.runs(campaign="t-sweep")
    assert list(attempts["verdict"]) == ["failed"]
    assert "point 2 fails on purpose" in attempts["notes"][0]
    assert runs["cache_reached"].isna().all()  # never tried: not "not reached" in the PR table
    assert "RuntimeError: point 2 fails on purpose" in runs["error"][0]


def test_resume_after_interrupt_runs_only_what_is_left(space):
    gate = space["root"] / "gate"
    path = write_sweep(space, {"x": [1, 2, 3]}, gate=str(gate))
    cmd = [sys.executable, "-m", "workbench.cli", "sweep", str(path), "--ledger", str(space["ledger"]),
           "--out", str(space["out"])]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        # Interrupt while point x=2 waits at its gate: point 1 finished, point 2 half-way, point 3 not begun.
        while not (ran(space) == [1] and Path(f"{gate}.pid").exists()):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "the sweep never reached point 2"
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the sweep stops and shuts its kernel down
        try:  # a kernel's shutdown took over 60 s on the 2-core VM at load 8 (2026-12-02)
            proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    said = proc.stderr.read().decode()
    assert proc.returncode == 130, said
    assert "interrupted: 1/3 points completed" in said and f"resume with: workbench sweep {path} --resume" in said
    assert "Aborted" not in said
    assert ran(space) == [1]
    half = [p for p in space["out"].glob("*.ipynb") if "x=2" in p.name]
    assert len(half) == 1 and not point_completed(half[0])
    # The interrupted point's kernel must be gone before the gate opens, or it would finish the
    # point after the sweep said it stopped (seen once in CI while its shutdown was still under way).
    wait_until_gone(int(Path(f"{gate}.pid").read_text()), timeout=60)
    gate.write_text("open")
    result = cli("sweep", str(path), "--resume", "--ledger", str(space["ledger"]), "--out", str(space["out"]))
    assert result.exit_code == 0, result.output
    assert "2 done, 1 skipped (resumed), 0 failed" in result.output
    assert ran(space) == [1, 2, 3]  # point 1 ran once: its marker is the only one
    assert len(list(space["marks"].iterdir())) == 3


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the finalizer's, on purpose
def test_a_ctrl_c_swallowed_by_a_finalizer_still_stops_the_sweep_after_its_point(space, monkeypatch):
    # CI, fresh clone at 4b10367 (2-core VM, 2026-12-03): the interrupt test above exited 3 after 128 s —
    # the sweep ran on after its SIGINT. A KeyboardInterrupt raised while Python runs a finalizer is
    # printed and dropped; the sweep must still stop once the point under way has ended.
    import workbench.cli.sweep.execute as execute

    def run_sweep(spec, *, ledger_path, resume, out_dir, on_point):  # noqa: ANN001, ANN202
        class Swallows:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # the handler runs in here: its KeyboardInterrupt is "ignored"

        Swallows()
        points = execute.expand_grid(spec)
        outcomes = []
        for p in points:
            outcomes.append(execute.PointOutcome(p, "done", p.output(Path(out_dir)), 0.1))
            on_point(outcomes[-1])
        return execute.SweepReport(spec, Path(out_dir), tuple(outcomes))

    monkeypatch.setattr(execute, "run_sweep", run_sweep)
    handler = signal.getsignal(signal.SIGINT)  # ignored under pytest-xdist's workers, Python's default alone
    path = write_sweep(space, {"x": [1, 2, 3]})
    result = CliRunner().invoke(main, ["sweep", str(path), "--ledger", str(space["ledger"]), "--out",
                                       str(space["out"])])
    assert result.exit_code == 130, result.output
    assert "interrupted: 1/3 points completed" in result.output
    assert signal.getsignal(signal.SIGINT) == handler  # the latch is gone with the sweep


def test_resume_reruns_points_whose_ledger_is_gone(space):
    # Found in review: a rerun after deleting the ledger skipped every point and left it empty.
    path = write_sweep(space, {"x": [1, 2]})
    args = ["sweep", str(path), "--ledger", str(space["ledger"]), "--out", str(space["out"])]
    assert cli(*args).exit_code == 0
    assert "0 done, 2 skipped" in cli(*args, "--resume").output  # same ledger: nothing to do
    for f in space["root"].glob("ledger.sqlite*"):
        f.unlink()
    dry = cli(*args, "--dry-run").output
    assert "(completed)" not in dry and not space["ledger"].exists()  # a dry run creates no ledger
    assert "2 done, 0 skipped" in cli(*args, "--resume").output
    other = space["root"] / "other.sqlite"
    result = cli("sweep", str(path), "--ledger", str(other), "--out", str(space["out"]), "--resume")
    assert "2 done, 0 skipped" in result.output  # a different ledger has none of these points


@pytest.mark.parametrize("fixed, needle", [
    ({"run": 1}, "has no parameter(s) run"),  # a typo must not run the notebook's defaults
    ({"campaign": "x"}, "set by the sweep itself"),
])
def test_sweep_keys_the_notebook_does_not_take_are_refused(space, fixed, needle):
    path = write_sweep(space, {"x": [1]}, **fixed)
    for extra in ([], ["--dry-run"]):
        result = CliRunner().invoke(main, ["sweep", str(path), "--ledger", str(space["ledger"]),
                                           "--out", str(space["out"]), *extra])
        assert result.exit_code == 2 and needle in result.output
    assert ran(space) == []


def test_dry_run_shows_configs_runs_and_an_estimate_from_the_ledger(tmp_path):
    from ledger_helpers import record_attempt
    from workbench.ledger import Ledger

    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as led:
        record_attempt(led, "pread", [0.1, 0.1, 0.1], file="/models/tiny.gguf")  # wall 0.4 s a run
    doc = {"notebook": "01_load_sweep", "campaign": "plan",
           "parameters": {"file": "/models/tiny.gguf", "strategies": ["pread", "mmap"], "runs": 4,
                          "params": {"mmap": {"gate": [0.5, 0.9]}}},
           "grid": {"caches": [["cold"], ["cold", "warm"]]}}
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps(doc))
    out = cli("sweep", str(path), "--dry-run", "--ledger", str(ledger), "--out", str(tmp_path / "runs")).output
    lines = out.splitlines()
    # point 0: (pread + mmap × 2 gates) in cold; warm has no history for this file, so no estimate
    assert lines[2].strip() == "3 configs × 4 runs = 12 runs, ≈ 5 s (1/3 configs from recorded runs)"
    assert lines[4].strip() == "6 configs × 4 runs = 24 runs, no recorded runs to estimate the time from"
    fresh = cli("sweep", str(path), "--dry-run", "--ledger", str(tmp_path / "none.sqlite")).output
    assert "no recorded runs" in fresh and not (tmp_path / "none.sqlite").exists()


def test_the_progress_bar_counts_runs_inside_a_point(tmp_path):
    from ledger_helpers import make_run, record_attempt
    from workbench.cli.sweep.plan import RunWatch
    from workbench.ledger import Ledger

    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as led:
        record_attempt(led, "pread", [0.1], campaign="before")  # not this point's
        with RunWatch(ledger, "c", total=3) as watch:
            attempt, _ = record_attempt(led, "pread", [0.1, 0.1], campaign="c")
            led.add_run(attempt, make_run(2, 0.1))
            deadline = time.time() + 10
            while watch.bar.n < 3 and time.time() < deadline:
                time.sleep(0.1)
            assert watch.bar.n == 3 and watch.bar.total == 3
