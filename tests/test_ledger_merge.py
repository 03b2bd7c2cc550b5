"""Several machines, one history: merge is idempotent and keeps every host's attempts."""
from __future__ import annotations

import pytest

from ledger_helpers import fill_ledger, record_attempt
from workbench.errors import LedgerError
from workbench.ledger import RUNNING, Ledger
from workbench.records import RunConfig


def test_merge_twice_adds_nothing_the_second_time(tmp_path):
    fill_ledger(tmp_path / "a.sqlite", host="rig-a")
    fill_ledger(tmp_path / "b.sqlite", host="rig-b")
    with Ledger(tmp_path / "b.sqlite") as other:
        other.record_ceiling("disk_cold_1t", 1.8, {}, host="rig-b")
        other.set_verdict(other.attempts()["id"][1], "kept")
    with Ledger(tmp_path / "a.sqlite") as led:
        first = led.merge(tmp_path / "b.sqlite")
        assert (first["campaigns"], first["attempts"], first["runs"]) == (0, 3, 13)  # "c" matched by name
        assert (first["ceilings"], first["verdict_history"]) == (1, 1)
        second = led.merge(tmp_path / "b.sqlite")
        added = {k: v for k, v in second.items() if not k.startswith(("skipped_", "attempts_running"))}
        assert all(count == 0 for count in added.values()), second
        frame = led.attempts("c")
        assert len(frame) == 6 and set(frame["host"]) == {"rig-a", "rig-b"}
        assert len(led.runs()) == 26 and len(led.campaigns()) == 1
        assert "kept" in set(frame["verdict"])
    with Ledger(tmp_path / "b.sqlite") as other:  # edited on the other rig after the first merge
        edited = other.set_verdict(other.attempts()["id"][0], "reference", note="the rig-b baseline")
    with Ledger(tmp_path / "a.sqlite") as led:
        counts = led.merge(tmp_path / "b.sqlite")
        # an attempt this ledger already holds is never rewritten by a merge, its verdict included
        assert (counts["verdict_history"], counts["skipped_verdict_history"], counts["attempts"]) == (0, 1, 0)
        assert led.attempt(edited)["verdict"] == "baseline"


def test_merge_brings_new_campaigns_and_never_rewrites_an_attempt_it_holds(tmp_path):
    with Ledger(tmp_path / "b.sqlite") as other:
        record_attempt(other, "pread", [0.1, 0.1], campaign="apu", host="rig-b")
        running = other.start_attempt(campaign="apu", config=RunConfig("/m", "mmap"), cache="cold",
                                      file_identity=None, environment=None, device_info=None, host="rig-b")
    with Ledger(tmp_path / "a.sqlite") as led:
        assert led.merge(tmp_path / "b.sqlite")["campaigns"] == 1
        assert led.attempt(running)["verdict"] == RUNNING
    with Ledger(tmp_path / "b.sqlite") as other:
        from ledger_helpers import make_run
        from workbench.measure.run.stats import summarize

        other.add_run(running, make_run(0, 0.2))
        other.finish_attempt(running, summarize([make_run(0, 0.2)], 10), baseline_id=None, speedup=None,
                             verdict="inconclusive")
    with Ledger(tmp_path / "a.sqlite") as led:
        counts = led.merge(tmp_path / "b.sqlite")
        assert (counts["attempts"], counts["attempts_running_here"], counts["runs"], counts["skipped_runs"]) \
            == (0, 1, 0, 1)
        a = led.attempt(running)
        assert a["verdict"] == RUNNING and a["campaign"] == "apu" and led.runs(running).empty
    with Ledger(tmp_path / "fresh.sqlite") as led:  # a ledger that does not hold it takes the finished state
        led.merge(tmp_path / "b.sqlite")
        assert led.attempt(running)["verdict"] == "inconclusive" and len(led.runs(running)) == 1


def test_merge_refuses_missing_self_and_foreign_files(tmp_path):
    with Ledger(tmp_path / "a.sqlite") as led:
        with pytest.raises(LedgerError, match="no such ledger"):
            led.merge(tmp_path / "missing.sqlite")
        with pytest.raises(LedgerError, match="into itself"):
            led.merge(tmp_path / "a.sqlite")
        import sqlite3

        sqlite3.connect(tmp_path / "foreign.sqlite").execute("CREATE TABLE t (x)").connection.close()
        with pytest.raises(LedgerError, match="not a workbench ledger"):
            led.merge(tmp_path / "foreign.sqlite")
        assert led.attempts().empty  # and the ledger is still usable
