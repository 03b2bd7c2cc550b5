"""Ledger storage: round trips of real records, verdict edits, path rules, crash safety, ceilings."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from ledger_helpers import NBYTES, fill_ledger, make_run, record_attempt
from workbench.errors import LedgerError
from workbench.ledger import RUNNING, Ledger
from workbench.records import RunConfig


def test_round_trip_of_runs_and_stats(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        runs = [make_run(0, 0.5), make_run(1, None, error="WorkerFailed: exit 3"), make_run(2, 0.6, verified=None)]
        attempt_id = led.start_attempt(
            campaign="c", config=RunConfig("/m.gguf", "pread", {"evict": True, "threads": 2}), cache="cold",
            hypothesis="eviction hurts", file_identity={"path": "/m.gguf", "size": NBYTES, "hash": "xxh3_128:ab"},
            environment={"kernel": "6.8", "cores": 2}, device_info={"name": "host memory"}, host="rig-a",
        )
        for run in runs:
            led.add_run(attempt_id, run)
        assert led.attempt(attempt_id)["verdict"] == RUNNING
        from workbench.measure.run.stats import summarize

        stats = summarize(runs, NBYTES)
        led.finish_attempt(attempt_id, stats, baseline_id=None, speedup=None, verdict="baseline",
                           ceiling_name="disk_cold_1t", ceiling_gbps=2.0, notes="first")
        assert led.run_records(attempt_id) == runs
        assert led.attempt_stats(attempt_id) == stats
        a = led.attempt(attempt_id[:8])
        assert a["params"] == {"evict": True, "threads": 2}
        runner = a["environment"].pop("runner")  # who records it: how a reader tells a dead runner
        assert a["environment"] == {"kernel": "6.8", "cores": 2} and runner["pid"] == os.getpid()
        assert (a["campaign"], a["host"], a["label"], a["cache"]) == ("c", "rig-a", "pread evict=True threads=2", "cold")
        assert (a["file_hash"], a["file_size"], a["verdict"], a["notes"]) == ("xxh3_128:ab", NBYTES, "baseline", "first")
        frame = led.attempts("c")
        assert frame.loc[0, "ceiling_fraction"] == pytest.approx(stats.gbps / 2.0)
        assert list(led.runs(attempt_id)["position"]) == [0, 1, 2]


def test_set_verdict_by_prefix_is_audited(tmp_path):
    base, fast, _ = fill_ledger(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as led:
        assert led.set_verdict(fast[:6], "kept", note="ship it") == fast
        led.set_verdict(fast, "reverted", note="regressed on the APU")
        a = led.attempt(fast)
        assert a["verdict"] == "reverted" and a["auto_verdict"] == "faster"
        assert "faster → kept: ship it" in a["notes"] and "kept → reverted: regressed on the APU" in a["notes"]
        history = led._query("SELECT old, new, note FROM verdict_history ORDER BY at")
        assert [(h["old"], h["new"]) for h in history] == [("faster", "kept"), ("kept", "reverted")]


def test_set_verdict_rejects_unknown_ids_and_names(tmp_path):
    base, _, _ = fill_ledger(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as led:
        with pytest.raises(LedgerError, match="no attempt"):
            led.set_verdict("ffffffffff", "kept")
        with pytest.raises(LedgerError, match="too short"):
            led.set_verdict(base[:4], "kept")
        with pytest.raises(LedgerError, match="unknown verdict"):
            led.set_verdict(base, "great")


def test_add_run_to_unknown_attempt_fails(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led, pytest.raises(LedgerError, match="no attempt"):
        led.add_run("0" * 32, make_run(0, 0.1))


def test_path_from_env_then_default(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "env" / "x.sqlite"))
    with Ledger() as led:
        assert led.path == tmp_path / "env" / "x.sqlite" and led.path.is_file()
    monkeypatch.delenv("WORKBENCH_LEDGER")
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)  # the default: data/ of the checkout the cwd is in, else ./data
    monkeypatch.chdir(tmp_path)
    with Ledger() as led:
        assert led.path.resolve() == (tmp_path / "data" / "ledger.sqlite").resolve()
        assert led._query("PRAGMA journal_mode")[0]["journal_mode"] == "wal"


def test_refuses_a_newer_schema_and_a_non_ledger(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(LedgerError, match="schema version 99"):
        Ledger(path)
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(LedgerError, match="junk.sqlite"):
        Ledger(tmp_path / "junk.sqlite")


def test_runs_survive_a_runner_that_dies(tmp_path):
    path = tmp_path / "l.sqlite"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from ledger_helpers import make_run
        from workbench.ledger import Ledger
        from workbench.records import RunConfig
        led = Ledger({str(path)!r})
        a = led.start_attempt(campaign="crash", config=RunConfig("/m", "pread"), cache="warm",
                              file_identity=None, environment=None, device_info=None)
        for i in range(3):
            led.add_run(a, make_run(i, 0.1))
        print(a, flush=True)
        os._exit(9)  # no close, no finish: the runner crashed
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    with Ledger(path) as led:  # a reader finds the runner gone: failed (interrupted), its runs kept
        attempt_id = proc.stdout.strip()
        attempt = led.attempt(attempt_id)
        assert attempt["verdict"] == "failed" and attempt["verdict_reason"] == "interrupted"
        assert attempt["n"] == 3 and len(led.runs(attempt_id)) == 3


def test_ceilings_latest_per_host_and_name(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        led.record_ceiling("page_cache_read_8t", 40.0, {"threads": 8}, host="rig-a")
        led.record_ceiling("page_cache_read_8t", 46.0, {"threads": 8, "try": 2}, host="rig-a")
        led.record_ceiling("disk_cold_1t", 1.8, {}, host="rig-a")
        led.record_ceiling("page_cache_read_8t", 20.0, {}, host="rig-b")
        frame = led.ceilings("rig-a")
        assert dict(zip(frame["name"], frame["gbps"])) == {"disk_cold_1t": 1.8, "page_cache_read_8t": 46.0}
        assert frame.set_index("name").loc["page_cache_read_8t", "detail"] == {"threads": 8, "try": 2}
        assert len(led.ceilings()) == 3


def test_campaigns_listed_with_counts(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        record_attempt(led, "pread", [0.1, 0.1], campaign="a")
        record_attempt(led, "pread", [0.1, 0.1], campaign="b")
        record_attempt(led, "mmap", [0.1, 0.1], campaign="b")
        assert led.ensure_campaign("b", "second") == led.ensure_campaign("b")
        frame = led.campaigns().set_index("name")
        assert frame.loc["b", "attempts"] == 2 and frame.loc["b", "description"] == "second"
        assert len(led.attempts("b")) == 2 and led.attempts("nope").empty


def test_finish_replaces_the_cache_label_the_first_run_gave(tmp_path):
    # Found in review: the first run reached cold, the other four did not; the column kept "cold".
    from ledger_helpers import NBYTES, make_run
    from workbench.records import RunConfig
    from workbench.measure.run.stats import summarize

    with Ledger(tmp_path / "l.sqlite") as led:
        attempt_id = led.start_attempt(campaign="c", config=RunConfig("/m.gguf", "pread"), cache="cold")
        runs = [make_run(i, 0.1, cache_reached=(i == 0)) for i in range(5)]
        for run in runs:
            led.add_run(attempt_id, run)
        led.finish_attempt(attempt_id, summarize(runs, NBYTES), baseline_id=None, speedup=None,
                           verdict="baseline", cache="asis(unreachable: cold, 4/5 runs)")
        assert led.attempt(attempt_id)["cache"] == "asis(unreachable: cold, 4/5 runs)"
        assert led.attempts()["cache"].tolist() == ["asis(unreachable: cold, 4/5 runs)"]
