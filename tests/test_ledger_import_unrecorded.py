"""``workbench ledger import-unrecorded``: a dump left by a failed ledger write, recorded afterwards."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.ledger import Ledger


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from workbench.formats.synth import write_synthetic

    path = tmp_path_factory.mktemp("import-unrecorded") / "dense.gguf"
    write_synthetic(path, format="gguf", layout="dense", size=256 << 10, seed=7)
    return str(path)


@pytest.fixture()
def cut(model, tmp_path, isolated_cache, monkeypatch):
    """A real dump: a (pread) and b (mmap), 2 runs each, measured on the host backend; after the first
    run another writer locks the ledger past its busy timeout (as in tests/test_faults_ledger.py), and
    lets go once a write has failed, so the runner closes its half-recorded attempt as failed."""
    from workbench.errors import UnrecordedResults
    from workbench.measure import RunConfig, measure

    monkeypatch.setenv(defaults.LEDGER_BUSY_TIMEOUT, "0.3")
    ledger = tmp_path / "l.sqlite"
    holder = sqlite3.connect(str(ledger), isolation_level=None)

    def disturb(done: int, total: int, config: RunConfig, run: object) -> None:
        if done == 1:
            holder.execute("BEGIN EXCLUSIVE")
        elif done == 2:
            holder.execute("ROLLBACK")

    with Ledger(ledger) as led:
        with pytest.raises(UnrecordedResults) as info:
            measure([RunConfig(model, "pread"), RunConfig(model, "mmap")], runs=2, cache="asis", ledger=led,
                    campaign="cut", labels=["a", "b"], lock_dir=tmp_path / "locks", progress=disturb)
    holder.close()
    assert info.value.dump is not None
    return ledger, Path(info.value.dump), info.value.results


def invoke(*args: str):
    return CliRunner().invoke(main, ["ledger", *args])


def check_complete(ledger: Path, results) -> None:
    with Ledger(ledger) as led:
        attempts = led.attempts("cut").to_dict("records")
        assert [a["label"] for a in attempts] == ["a", "b"]
        for row, result in zip(attempts, results):
            assert row["verdict"] == result.verdict and row["n"] == result.stats.n == 2
            assert row["median_s"] == pytest.approx(result.stats.median_s)
            assert row["verdict_reason"] == result.verdict_reason
            assert "imported from workbench-unrecorded-" in row["notes"]
            runs = led.runs(row["id"]).to_dict("records")
            assert sorted(r["load_s"] for r in runs) == sorted(r.load_s for r in result.runs)
            assert all(r["result"] for r in runs)  # the worker's whole report came back too
        assert attempts[1]["baseline_id"] == attempts[0]["id"]
        assert len(led.runs(campaign="cut")) == 4


def test_the_dump_goes_back_into_the_ledger_that_refused_it(cut, tmp_path):
    ledger, dump, results = cut
    with Ledger(ledger) as led:  # before: a half-recorded attempt closed as failed, b never opened
        (a,) = led.attempts("cut").to_dict("records")
        assert a["verdict"] == "failed" and "ledger write failed mid-attempt" in a["notes"]
        assert len(led.runs(a["id"])) == 1
    first = invoke("import-unrecorded", str(dump), "--ledger", str(ledger))
    assert first.exit_code == 0, first.output
    lines = first.output.splitlines()
    assert "a: completed (+1 runs)" in lines[0] and "b: imported (+2 runs)" in lines[1]
    assert "1 imported, 1 completed, 0 already present; 3 runs added" in lines[-1]
    check_complete(ledger, results)
    with Ledger(ledger) as led:
        (a_after, _) = led.attempts("cut").to_dict("records")
        assert a_after["id"] == a["id"] and "ledger write failed mid-attempt" in a_after["notes"]

    again = invoke("--ledger", str(ledger), "import-unrecorded", str(dump))
    assert again.exit_code == 0, again.output
    assert "0 imported, 0 completed, 2 already present; 0 runs added" in again.output
    check_complete(ledger, results)

    exported = invoke("export", "--csv", str(tmp_path / "out"), "--markdown", "-", "--ledger", str(ledger))
    assert exported.exit_code == 0, exported.output
    assert "cut" in (tmp_path / "out" / "attempts.csv").read_text()


def test_the_dump_goes_into_a_fresh_ledger_once(cut, tmp_path):
    _, dump, results = cut
    fresh = tmp_path / "fresh.sqlite"
    first = invoke("import-unrecorded", str(dump), "--ledger", str(fresh))
    assert first.exit_code == 0, first.output
    assert "2 imported, 0 completed, 0 already present; 4 runs added" in first.output
    check_complete(fresh, results)
    with Ledger(fresh) as led:
        env = led.attempts("cut").iloc[0]["environment"]
        assert env["imported_from"]["attempt_id"] == results[0].attempt_id

    again = invoke("import-unrecorded", str(dump), "--ledger", str(fresh))
    assert again.exit_code == 0 and "2 already present; 0 runs added" in again.output
    with Ledger(fresh) as led:
        assert len(led.attempts()) == 2 and len(led.runs()) == 4
    assert invoke("export", "--markdown", str(tmp_path / "t.md"), "--ledger", str(fresh)).exit_code == 0


@pytest.mark.parametrize("content, problem", [
    ("not json {", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"ledger": "x", "error": "e"}', "'attempts' missing"),
    ('{"ledger": "x", "error": "e", "attempts": "no"}', "'attempts' should be list"),
    ('{"ledger": "x", "error": "e", "attempts": [{"attempt_id": 3}]}', "'attempts[0].attempt_id' should be str"),
])
def test_a_file_that_is_no_dump_is_one_line_and_nothing_written(tmp_path, content, problem):
    bad, ledger = tmp_path / "bad.json", tmp_path / "l.sqlite"
    bad.write_text(content)
    result = invoke("import-unrecorded", str(bad), "--ledger", str(ledger))
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line]
    assert len(errors) == 1 and str(bad) in errors[0] and problem in errors[0], result.output
    assert not ledger.exists()


def test_a_bad_run_deep_in_a_real_dump_writes_nothing(cut, tmp_path):
    ledger, dump, _ = cut
    data = json.loads(dump.read_text())
    data["attempts"][1]["runs"][1]["position"] = "first"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with Ledger(ledger) as led:
        before = len(led.runs())
    result = invoke("import-unrecorded", str(bad), "--ledger", str(ledger))
    assert result.exit_code == 2 and "attempts[1].runs[1].position' should be int" in result.output
    with Ledger(ledger) as led:
        assert len(led.runs()) == before


def test_records_round_trip_through_json():
    from workbench.measure.run.attempt import run_from_json, run_to_json
    from workbench.records import AttemptStats, RunConfig, RunRecord, Timings, WorkerReport

    stats = AttemptStats(3, 1, 0.5, 0.4, 0.6, 40.0, 2.5, False)
    assert AttemptStats.from_json(stats.to_json()) == stats
    config = RunConfig("m.gguf", "pread", {"threads": 4}, "host", "a")
    assert RunConfig.from_json(config.to_json()) == config
    run = RunRecord(position=2, pid=41, load_s=0.1, wall_s=0.3, bytes=100, resident_before=0.5, cache_state="warm",
                    cache_reached=True, verified=None, engaged=("mmap",), phases={"read": 0.1}, minflt=3,
                    report=WorkerReport(timings=Timings(None, 0.1, 0.2, 0.3, 0.0, 0.6), cache_error="x"))
    assert run_from_json(run_to_json(run)) == run
    assert run_from_json({**run_to_json(run), "result": run.report.to_json()}).report == WorkerReport.from_json(
        run.report.to_json())
