"""The data model at the bottom: engaged facts, the typed worker report and its JSON, failure reasons."""
from __future__ import annotations

import json

from workbench.records import (
    Engaged, ExternalRun, LoadPath, LoadSummary, RunRecord, Timings, VerifySummary, WorkerReport,
    failure_reason,
)


def test_engaged_states_and_text() -> None:
    assert Engaged("zero_copy", 92, 92).state == "ON"
    assert Engaged("zero_copy", 3, 92).state == "PARTIAL"
    assert Engaged("zero_copy", 0, 92).state == Engaged("x", 0, 0).state == "INERT"
    fact = Engaged("lanes", 2, 4, "threads", "capped")
    assert str(fact) == "lanes: 2/4 threads — PARTIAL (capped)"
    assert fact.to_json()["text"] == str(fact) and Engaged.from_json(fact.to_json()) == fact


def _worker_report() -> WorkerReport:
    load = LoadSummary("lanes", {"threads": 2, "evict": None}, "host", 4096, 2, 0.01, 0.41, {"read": 0.004},
                       7, 0, False, "device-discrete", (Engaged("lanes", 2, 2, "threads"),), ("a note",),
                       {"dontneed_calls": 0}, LoadPath(readers=2, copy_from="pinned"))
    return WorkerReport(pid=42, device_info={"backend": "host", "uma": False}, file="/m.gguf", strategy="lanes",
                        device="host", load_s=0.011, init_s=0.001, index_s=0.001, verify_s=0.002, load=load,
                        verified=True, verify=VerifySummary(True, 2, 2, 0), resident_after=1.0,
                        timings=Timings(None, 0.2, 0.001, 0.011, 0.002, 0.3, ("gguf",), prepare_s=0.0004),
                        host_memory_reported_mib=0.0)


def test_worker_report_round_trips_through_json_text() -> None:
    report = _worker_report()
    data = json.loads(json.dumps(report.to_json()))
    assert WorkerReport.from_json(data) == report
    assert set(data) == {"pid", "file", "strategy", "device", "device_info", "load_s", "init_s", "index_s",
                         "verify_s", "result", "verified", "verify", "resident_after", "timings",
                         "host_memory_reported_mib"}
    assert data["result"]["engaged"][0]["state"] == "ON" and data["result"]["path"]["readers"] == 2


def test_external_and_empty_reports_keep_their_keys() -> None:
    ran = WorkerReport(pid=7, device_info={"backend": "external"},
                       external=ExternalRun("engine -m x", "loaded", None, ("loading", "loaded"), "loaded"))
    assert set(ran.to_json()) == {"pid", "cmd", "marker", "returncode", "output_tail", "device_info", "marker_line"}
    assert WorkerReport.from_json(ran.to_json()) == ran
    died = WorkerReport(pid=8, device_info={"backend": "external"}, external=ExternalRun("x", "y", 3, ("boom",)))
    assert "marker_line" not in died.to_json() and WorkerReport.from_json(died.to_json()) == died
    noted = WorkerReport(cache_error="tmpfs")
    assert noted.to_json() == {"cache_error": "tmpfs"} and WorkerReport().to_json() == {}


def test_run_record_json_keeps_the_report_under_result() -> None:
    run = RunRecord(3, 42, 0.011, 0.3, 4096, 1.0, "warm", True, True, ("lanes: 2/2 threads — ON",),
                    {"read": 0.004}, 7, 0, 0.0, None, _worker_report())
    data = json.loads(json.dumps(run.to_json()))
    assert data["result"]["pid"] == 42 and RunRecord.from_json(data) == run


def test_failure_reason_says_what_failed() -> None:
    assert failure_reason(0, [], 0) == "no runs recorded"
    assert failure_reason(3, [], 0) == ""
    assert failure_reason(3, ["Traceback\n  ...\nValueError: boom"], 0) == "1/3 runs failed: ValueError: boom"
    assert failure_reason(3, ["x", "y"], 1) == "2/3 runs failed: x; 1/3 runs read back wrong bytes"
