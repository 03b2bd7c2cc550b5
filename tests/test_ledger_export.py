"""CSV round trips through pandas; the Markdown table reads like the write-ups'."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from ledger_helpers import NBYTES, fill_ledger, make_run
from workbench.ledger import Ledger, export_csv, export_markdown, markdown_table

KEY_ATTEMPT_COLUMNS = ["id", "campaign", "host", "strategy", "cache", "n", "n_failed", "median_s", "spread_pct",
                       "gbps", "baseline_id", "speedup", "verdict"]
KEY_RUN_COLUMNS = ["id", "attempt_id", "position", "pid", "load_s", "wall_s", "bytes", "error", "minflt"]


def test_csv_round_trips_through_pandas(tmp_path):
    fill_ledger(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as led:
        attempts_csv, runs_csv = export_csv(led, tmp_path / "out")
        assert (attempts_csv.name, runs_csv.name) == ("attempts.csv", "runs.csv")
        attempts, runs = led.attempts(), led.runs()
    back = pd.read_csv(attempts_csv)
    pd.testing.assert_frame_equal(back[KEY_ATTEMPT_COLUMNS], attempts[KEY_ATTEMPT_COLUMNS],
                                  check_dtype=False)
    assert [json.loads(p) for p in back["params"]] == list(attempts["params"])
    back_runs = pd.read_csv(runs_csv)
    pd.testing.assert_frame_equal(back_runs[KEY_RUN_COLUMNS], runs[KEY_RUN_COLUMNS], check_dtype=False)
    assert [json.loads(p) for p in back_runs["phases"]] == list(runs["phases"])


def test_csv_to_a_file_name_and_one_campaign(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        from ledger_helpers import record_attempt

        record_attempt(led, "pread", [0.1, 0.1], campaign="a")
        record_attempt(led, "mmap", [0.1, 0.1], campaign="b")
        paths = export_csv(led, tmp_path / "x" / "b.csv", campaign="b")
    assert [p.name for p in paths] == ["b.csv", "b_runs.csv"]
    assert list(pd.read_csv(paths[0])["strategy"]) == ["mmap"]
    assert len(pd.read_csv(paths[1])) == 2


def test_markdown_header_and_one_row_per_attempt(tmp_path):
    base, fast, failed = fill_ledger(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as led:
        led.set_verdict(fast, "kept", note="pipe | in note")
        text = markdown_table(led)
        stats = led.attempt_stats(fast)
        speedup = led.attempt(fast)["speedup"]
    lines = text.splitlines()
    assert lines[0].startswith("**Machine** rig-a") and "host memory (host)" in lines[0]
    assert "tiny.gguf, 3.00 MiB, xxh3_128:" in lines[0]
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["attempt", "change", "cache", "median", "spread", "n", "GB/s", "vs baseline", "verdict", "engaged"]
    rows = {line.split("|")[1].strip(" `"): [c.strip() for c in line.strip("|").split("|")] for line in lines[4:]}
    assert set(rows) == {base[:8], fast[:8], failed[:8]}
    assert rows[base[:8]][7] == "baseline"
    assert rows[fast[:8]][3] == f"{stats.median_s * 1000:.0f} ms"
    assert rows[fast[:8]][7] == f"{speedup:.2f}×"
    assert rows[fast[:8]][8] == "kept (measured: faster)"
    assert rows[failed[:8]][3] == "—" and rows[failed[:8]][8].startswith("failed — 3/3 runs failed: WorkerFailed")


def test_markdown_slower_and_written_to_file(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        from ledger_helpers import record_attempt

        base = record_attempt(led, "mmap", [0.20, 0.20, 0.21])
        record_attempt(led, "pread", [0.50, 0.50, 0.51], baseline=base)
        path = export_markdown(led, tmp_path / "md" / "table.md")
    text = path.read_text()
    assert "−60 %" in text and "| slower |" in text
    assert text == markdown_table(Ledger(tmp_path / "l.sqlite")) + "\n"


@pytest.mark.parametrize("campaign", [None, "absent"])
def test_markdown_of_nothing_says_so(tmp_path, campaign):
    with Ledger(tmp_path / "l.sqlite") as led:
        assert markdown_table(led, campaign).startswith("_No attempts")


def test_markdown_says_when_cache_was_not_reached_and_why_it_failed(tmp_path):
    from ledger_helpers import NBYTES, make_run
    from workbench.records import RunConfig
    from workbench.measure.stats import summarize

    with Ledger(tmp_path / "l.sqlite") as led:
        attempt_id = led.start_attempt(campaign="c", config=RunConfig("/m.gguf", "pread"), cache="cold")
        runs = [make_run(0, 0.1, cache_reached=False), make_run(1, 0.1, cache_reached=True)]
        for run in runs:
            led.add_run(attempt_id, run)
        led.finish_attempt(attempt_id, summarize(runs, NBYTES), baseline_id=None, speedup=None,
                           verdict="failed", notes="cold state not reached on tmpfs\nsecond line")
        row = markdown_table(led).splitlines()[-1]
    assert "| cold (not reached 1/2) |" in row
    assert "| failed — cold state not reached on tmpfs | zero_copy: 3/3 tensors ON |" in row


def test_markdown_shows_a_fast_path_that_did_not_engage_as_inert(tmp_path) -> None:
    import dataclasses

    from workbench.records import RunConfig
    from workbench.measure.stats import summarize

    with Ledger(tmp_path / "l.sqlite") as led:
        attempt_id = led.start_attempt(campaign="c", config=RunConfig("/m.gguf", "mmap"), cache="warm")
        runs = [dataclasses.replace(make_run(i, 0.1), engaged=(
            "zero_copy: 0/3 tensors — INERT (eviction on: fell back to pread)",)) for i in range(2)]
        for run in runs:
            led.add_run(attempt_id, run)
        led.finish_attempt(attempt_id, summarize(runs, NBYTES), baseline_id=None, speedup=None,
                           verdict="baseline")
        row = markdown_table(led).splitlines()[-1]
    assert row.endswith("| zero_copy: 0/3 tensors INERT |")
