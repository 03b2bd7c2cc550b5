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
        text = markdown_table(led, all_attempts=True)
        stats = led.attempt_stats(fast)
        stored = led.attempt(fast)
    lines = text.splitlines()
    assert lines[0].startswith("**Machine** rig-a") and "host memory (host)" in lines[0]
    assert "**file** tiny, 3.00 MiB, xxh3_128:" in lines[0]  # the model's name (the file's stem), size, hash
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["attempt", "change", "cache", "median", "spread", "n", "GB/s", "vs baseline", "verdict", "engaged"]
    rows = {line.split("|")[1].strip(" `"): [c.strip() for c in line.strip("|").split("|")] for line in lines[4:]}
    assert set(rows) == {base[:8], fast[:8], failed[:8]}
    assert rows[base[:8]][7] == "baseline"
    assert rows[fast[:8]][3] == f"{stats.median_s * 1000:.0f} ms"
    assert rows[fast[:8]][7] == f"{stored['speedup']:.2f}× [{stored['ci_low']:.2f}–{stored['ci_high']:.2f}]"
    assert rows[fast[:8]][8] == "kept · auto: faster"  # the person's verdict beside the rule's (n = 5: a claim)
    assert rows[failed[:8]][3] == "—" and rows[failed[:8]][8].startswith("failed — 3/3 runs failed: WorkerFailed")


def test_markdown_slower_and_written_to_file(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        from ledger_helpers import record_attempt

        base = record_attempt(led, "mmap", [0.20, 0.20, 0.21])
        record_attempt(led, "pread", [0.50, 0.50, 0.51], baseline=base)
        path = export_markdown(led, tmp_path / "md" / "table.md")
    text = path.read_text()
    assert "| 0.40× [0.39–0.42] | slower (n=3 \\< 5: not a claim) |" in text and "−" not in text  # one format for slower too
    assert text == markdown_table(Ledger(tmp_path / "l.sqlite")) + "\n"


@pytest.mark.parametrize("campaign", [None, "absent"])
def test_markdown_of_nothing_says_so(tmp_path, campaign):
    with Ledger(tmp_path / "l.sqlite") as led:
        assert markdown_table(led, campaign).startswith("_No attempts")


def test_markdown_says_when_cache_was_not_reached_and_why_it_failed(tmp_path):
    from ledger_helpers import NBYTES, make_run
    from workbench.records import RunConfig
    from workbench.measure.run.stats import summarize

    with Ledger(tmp_path / "l.sqlite") as led:
        attempt_id = led.start_attempt(campaign="c", config=RunConfig("/m.gguf", "pread"), cache="cold")
        runs = [make_run(0, 0.1, cache_reached=False), make_run(1, 0.1, cache_reached=True)]
        for run in runs:
            led.add_run(attempt_id, run)
        led.finish_attempt(attempt_id, summarize(runs, NBYTES), baseline_id=None, speedup=None,
                           verdict="failed", notes="cold state not reached on tmpfs\nsecond line")
        row = markdown_table(led, all_attempts=True).splitlines()[-1]
    assert "| cold (not reached 1/2) |" in row
    assert "| failed — cold state not reached on tmpfs | zero_copy: 3/3 tensors ON |" in row


def test_markdown_shows_a_fast_path_that_did_not_engage_as_inert(tmp_path) -> None:
    import dataclasses

    from workbench.records import RunConfig
    from workbench.measure.run.stats import summarize

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


def test_pr_table_keeps_the_latest_finished_attempt_per_configuration(tmp_path):
    from ledger_helpers import record_attempt

    with Ledger(tmp_path / "l.sqlite") as led:
        old = record_attempt(led, "pread", [0.5, 0.5, 0.5])
        new = record_attempt(led, "pread", [0.4, 0.4, 0.4])
        broken = record_attempt(led, "mmap", [None, None], baseline=new)
        other_file = record_attempt(led, "pread", [0.3, 0.3, 0.3], file="/models/other.gguf")
        default, every = markdown_table(led), markdown_table(led, all_attempts=True)
    assert new[0][:8] in default and other_file[0][:8] in default
    assert old[0][:8] not in default and broken[0][:8] not in default
    assert default.endswith("2 more (1 failed or interrupted, 1 superseded by a later run of the same "
                            "configuration) are in the attempt history (`--all` lists every attempt)._")
    assert all(a[0][:8] in every for a in (old, new, broken, other_file)) and "--all" not in every


def test_a_failed_sweep_point_does_not_blank_the_header(tmp_path):
    from workbench.records import AttemptStats, RunConfig, RunRecord

    with Ledger(tmp_path / "l.sqlite") as led:
        from ledger_helpers import record_attempt

        record_attempt(led, "pread", [0.5, 0.5, 0.5])
        config = RunConfig(file="", strategy="notebook:01_load_sweep", params={}, device="", label="01-point")
        attempt = led.start_attempt(campaign="c", config=config, cache="warm")
        led.add_run(attempt, RunRecord(0, None, None, 1.0, 0, None, "warm", None, None, error="boom"))
        led.finish_attempt(attempt, AttemptStats(0, 1, None, None, None, None, None, False), baseline_id=None,
                           speedup=None, verdict="failed")
        header = markdown_table(led, all_attempts=True).splitlines()[0]
        row = markdown_table(led, all_attempts=True).splitlines()[-1]
    assert "**device** host memory (host) ·" in header and "**file** tiny, 3.00 MiB" in header
    assert ", ·" not in header and "**file** ," not in header
    assert "| warm |" in row and "not reached" not in row  # a point that never ran reached nothing


def test_csv_neutralizes_cells_a_spreadsheet_would_run(tmp_path):
    from workbench.records import RunConfig

    with Ledger(tmp_path / "l.sqlite") as led:
        for i, text in enumerate(["=1+1", "+cmd", "-2", "@SUM(A1)", "\tx", "\rx", "plain", " =1+1", "\u3000+cmd",
                                  "\uff1dSUM(A1)", "\uff20x", "\ufe66x", "a=1"]):
            led.start_attempt(campaign="c", config=RunConfig("/m.gguf", "pread"), cache="cold", label=text,
                              hypothesis=text)
        attempts_csv, _ = export_csv(led, tmp_path / "out")
    back = pd.read_csv(attempts_csv, dtype=str, keep_default_na=False)
    assert list(back["label"]) == ["'=1+1", "'+cmd", "'-2", "'@SUM(A1)", "'\tx", "'\rx", "plain", "' =1+1",
                                   "'\u3000+cmd", "'\uff1dSUM(A1)", "'\uff20x", "'\ufe66x", "a=1"]
    assert list(back["hypothesis"]) == list(back["label"])


def test_csv_has_one_name_per_quantity_and_the_effect(tmp_path):
    base, fast, _ = fill_ledger(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as led:
        attempts_csv, runs_csv = export_csv(led, tmp_path / "out")
        stored = led.attempt(fast)
    attempts = pd.read_csv(attempts_csv).set_index("id")
    assert attempts.loc[base, "effect"] == "baseline"
    assert attempts.loc[fast, "effect"] == f"{stored['speedup']:.2f}× [{stored['ci_low']:.2f}–{stored['ci_high']:.2f}]"
    runs = pd.read_csv(runs_csv)
    ok = runs.dropna(subset=["load_s"])
    assert (ok["gbps"] - NBYTES / ok["load_s"] / 1e9).abs().max() < 1e-9
    own = [json.loads(r)["result"] for r in ok["result"]]
    assert list(ok["strategy_load_s"]) == [o["load_s"] for o in own]  # the strategy's own load, index excluded
    assert list(ok["strategy_gbps"]) == [o["gbps"] for o in own]


def test_report_says_few_runs_are_not_a_claim_and_the_history_carries_the_interval(tmp_path):
    from ledger_helpers import record_attempt
    from workbench.ledger.report import write_report

    with Ledger(tmp_path / "l.sqlite") as led:
        base = record_attempt(led, "pread", [0.5, 0.52, 0.51], campaign="few")
        fast = record_attempt(led, "mmap", [0.25, 0.26, 0.25], campaign="few", baseline=base)
        paths = write_report(led, "few", tmp_path / "r")
        stored = led.attempt(fast[0])
        base5 = record_attempt(led, "pread", [0.5] * 5, campaign="enough")
        enough = write_report(led, "enough", tmp_path / "e")
    md = paths.markdown.read_text()
    assert "**n < 5 is not a claim:** attempts here have 3–3 runs" in md.split("| attempt |")[0]
    assert "<b>n &lt; 5 is not a claim:</b>" in paths.html.read_text()
    effect = f"{stored['speedup']:.2f}× [{stored['ci_low']:.2f}–{stored['ci_high']:.2f}]"
    assert (f"**faster (n=3 \\< 5: not a claim)** {effect}: interval excludes 1 (independent runs)"
            in md.split("## Attempt history")[1])
    assert "not a claim" not in enough.markdown.read_text() and base5


INVISIBLE_LEADERS = ["\u200b", "\u2060", "\ufeff", "\u180e", "\u034f", "\u00ad", "\u3164", "\u115f", "\u202e", "\u061c",
                     "\0"]  # the eleven that passed before issue 24 §5


def test_csv_neutralizes_formulas_behind_characters_that_draw_nothing(tmp_path):
    from workbench.records import RunConfig

    texts = [lead + sign for lead in INVISIBLE_LEADERS for sign in ("=1+1", "+cmd", "-2", "@SUM(A1)")]
    texts += ["\u200b\u00a0\ufe0f=x", "\u200bplain", "a=1"]
    with Ledger(tmp_path / "l.sqlite") as led:
        for text in texts:
            led.start_attempt(campaign="c", config=RunConfig("/m.gguf", "pread"), cache="cold", label=text)
        attempts_csv, _ = export_csv(led, tmp_path / "out")
    back = pd.read_csv(attempts_csv, dtype=str, keep_default_na=False)
    assert list(back["label"]) == ["'" + t for t in texts[:-2]] + texts[-2:]


def test_csv_neutralizing_goes_by_property_over_every_code_point():
    """Every character of the categories that draw nothing (controls, format characters, spaces and
    separators, combining marks) and the Hangul fillers, before a formula sign, is neutralized; a
    letter, digit or symbol before it is not."""
    import sys
    import unicodedata

    from workbench.output.untrusted import for_csv

    unseen = {"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"}
    missed, wrong = [], []
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat == "Cs":
            continue
        hidden = cat in unseen or ch in "\u115f\u1160\u3164\uffa0"
        neutralized = for_csv(ch + "=1+1") == "'" + ch + "=1+1"
        if hidden and not neutralized:
            missed.append(f"U+{cp:04X}")
        if not hidden and neutralized and unicodedata.normalize("NFKC", ch)[:1] not in "=+-@\t\r":
            wrong.append(f"U+{cp:04X}")
    assert not missed and not wrong, (missed[:20], wrong[:20])
