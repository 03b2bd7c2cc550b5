"""Workers that crash, abort, are killed, hang or exit 0 without a result: each is one failed run with
its exit status or signal and stderr tail, and the attempt, the other attempts and the sweep go on.

The faults are injected through ``WORKBENCH_TEST_FAULT`` (workbench/measure/run/faults.py): the worker
fires them at its first device copy, mid-load. Nothing the workbench ships can name them.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.ledger import Ledger
from workbench.measure import RunConfig, measure

# label → (fault, what the recorded error must say)
CRASHES = {
    "segv": ("segfault", "worker killed by SIGSEGV (exit status -11)"),
    "abrt": ("abort", "worker killed by SIGABRT (exit status -6)"),
    "kill": ("sigkill", "worker killed by SIGKILL (exit status -9)"),
    "silent": ("silent", "worker exit 0 without a result: printed no JSON result (empty stdout)"),
    "garbage": ("garbage",
                "worker exit 0 without a result: printed no JSON result (the JSON object is no worker report"),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from workbench.formats.synth import write_synthetic

    path = tmp_path_factory.mktemp("faults") / "dense.safetensors"
    write_synthetic(path, format="safetensors", layout="dense", size=256 << 10, seed=5)
    return str(path)


def test_every_crash_is_a_failed_run_with_its_status_and_the_others_go_on(model, tmp_path, isolated_cache):
    once = tmp_path / "once-token"
    table = {label: fault for label, (fault, _) in CRASHES.items()}
    table["segv-once"] = {"fault": "segfault", "once": str(once)}  # the first run only
    labels = ["ok", *CRASHES, "segv-once"]
    configs = [RunConfig(model, "pread", label=label) for label in labels]
    with Ledger(tmp_path / "l.sqlite") as ledger, defaults.set_injected_fault(json.dumps(table)):
        results = measure(configs, runs=2, cache="asis", ledger=ledger, campaign="crash",
                          lock_dir=tmp_path / "locks", labels=labels)
        stored = {a["label"]: a for a in ledger.attempts("crash").to_dict("records")}
        stored_runs = ledger.runs(campaign="crash")
    by_label = {r.label: r for r in results}
    ok = by_label["ok"]
    assert ok.verdict == "baseline" and ok.stats.n == 2 and all(r.verified for r in ok.runs)
    for label, (fault, text) in CRASHES.items():
        res = by_label[label]
        assert res.verdict == "failed" and res.stats.n == 0 and res.stats.n_failed == 2, label
        for run in res.runs:
            assert run.error.startswith(text), (label, run.error)
            assert f"injecting {fault}" in run.error  # the stderr tail came with it
            assert run.pid and run.wall_s and run.load_s is None
        assert stored[label]["verdict"] == "failed" and stored[label]["n_failed"] == 2
    for label in ("segv",):  # faulthandler: the tail says where it crashed
        assert "Fatal Python error: Segmentation fault" in by_label[label].runs[0].error
        assert "faults.py" in by_label[label].runs[0].error
    mixed = by_label["segv-once"]  # one crash, then the same attempt's next run succeeds
    assert [r.ok for r in mixed.runs] == [False, True] and mixed.verdict == "failed"
    assert mixed.stats.n == 1 and mixed.stats.n_failed == 1 and "1/2 runs failed" in mixed.notes
    assert len(stored_runs) == 2 * len(labels)  # every run recorded, crashed or not


def test_a_hung_worker_is_killed_at_the_timeout_and_says_where_it_hung(model, tmp_path, isolated_cache):
    configs = [RunConfig(model, "pread", label="hang")]
    with Ledger(tmp_path / "l.sqlite") as ledger, defaults.set_injected_fault('{"hang": "hang"}'):
        (res,) = measure(configs, runs=1, cache="asis", ledger=ledger, lock_dir=tmp_path / "locks",
                         timeout_s=6.0)
        (row,) = ledger.runs(res.attempt_id).to_dict("records")
    run = res.runs[0]
    assert run.error.startswith("worker timed out after 6 s (killed); stderr:")
    assert "injecting hang" in run.error and "in fire" in run.error  # the SIGUSR1 stack dump
    assert 6.0 <= run.wall_s < 60 and res.verdict == "failed" and row["error"] == run.error


def test_the_cli_reports_a_crashed_run_loudly_and_exits_3(model, tmp_path, isolated_cache):
    ledger = tmp_path / "l.sqlite"
    with defaults.set_injected_fault('{"*": "segfault"}'), defaults.set_lock_dir(tmp_path / "locks"):
        result = CliRunner().invoke(main, ["run", model, "--strategy", "pread", "--runs", "1", "--cache", "asis",
                                           "--ledger", str(ledger)])
    # a failed run is a result, not a crash of the command: the table and the ledger have it, and the
    # exit status says a run failed (3: README, "Exit status"), with no traceback
    assert result.exit_code == 3, result.output
    assert "FAILED" in result.output and "SIGSEGV" in result.output and "Traceback" not in result.output
    with Ledger(ledger, readonly=True) as led:
        assert list(led.attempts()["verdict"]) == ["failed"]


def test_unknown_fault_names_are_refused(model, monkeypatch):
    from workbench.errors import WorkbenchError
    from workbench.measure.run.faults import fault_for

    monkeypatch.setenv(defaults.TEST_FAULT, '{"*": "meltdown"}')
    with pytest.raises(WorkbenchError, match="unknown fault 'meltdown'"):
        fault_for({"label": "x"})
    monkeypatch.delenv(defaults.TEST_FAULT)
    assert fault_for({"label": "x"}) is None  # unset: no fault, ever


def test_the_fault_hook_is_no_strategy(tmp_path):
    from workbench.strategies import STRATEGIES

    result = CliRunner().invoke(main, ["strategies"])
    assert result.exit_code == 0
    for name in ("fault", "segfault", "hang"):
        assert name not in STRATEGIES and name not in result.output.split()
