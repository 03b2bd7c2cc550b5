"""A ledger written before the layer move (issue 8) still opens, lists, shows, exports and reports.

``fixtures/ledger-pre-arch.sqlite`` and its exports in ``fixtures/ledger-pre-arch/`` were made by the
code of commit 781c8a0 (``fixtures/make_ledger_pre_arch.py``): baselines, a kept verdict, a failed
worker, an unverified run, a cold state tmpfs could not reach, an external engine that worked and one
that did not, ceilings and an H2D campaign. Today's code must read it and export the same values.

The Markdown fixtures were edited where the table's *format* changed since (issue 9), never its
values: a single run's spread reads ``— ⚠`` instead of ``0.0 %``, and a slowdown reads ``0.35×``
instead of ``−65 %``. They hold every attempt (``--all``); the default PR table keeps the latest
finished attempt per configuration.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.ledger import Ledger, export_csv, export_markdown

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPORTED = FIXTURES / "ledger-pre-arch"
CAMPAIGNS = ("pre-arch", "h2d")


@pytest.fixture
def old_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURES / "ledger-pre-arch.sqlite", path)  # opening switches it to WAL
    return path


def attempt_ids(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT id FROM attempts ORDER BY created, id")]


def invoke(path: Path, *args: str):
    out = CliRunner().invoke(main, ["ledger", "--ledger", str(path), *args], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return out.output


def test_old_ledger_lists_every_attempt(old_ledger):
    ids = attempt_ids(old_ledger)
    assert len(ids) == 11
    from workbench.ledger.schema import SCHEMA_VERSION

    upgraded = invoke(old_ledger, "upgrade").strip()  # list never upgrades a ledger: upgrade does
    assert upgraded == f"{old_ledger}: schema version 1 → {SCHEMA_VERSION}"
    lines = invoke(old_ledger, "list").splitlines()[1:]
    assert [line.split()[0] for line in lines] == [i[:8] for i in ids]
    assert all("fixture-rig" in line for line in lines)
    assert sum(" kept" in line for line in lines) == 1 and sum(line.endswith("failed") for line in lines) == 2


def test_old_ledger_shows_every_attempt_with_its_runs(old_ledger):
    with Ledger(old_ledger) as ledger:  # a ledger opened to record is brought up to date
        runs = ledger.runs()
    for attempt_id in attempt_ids(old_ledger):
        shown = invoke(old_ledger, "show", attempt_id[:8])
        n = int((runs["attempt_id"] == attempt_id).sum())
        assert attempt_id in shown and f"runs ({n}):" in shown


def _same_old_columns(new: Path, old: Path) -> None:
    """Every column the old export had holds the same text; columns added since (schema 2: kind,
    interval, binary) carry their defaults for rows written before they existed."""
    import pandas as pd

    got, want = (pd.read_csv(p, dtype=str, keep_default_na=False) for p in (new, old))
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)
    added = [c for c in got.columns if c not in want.columns]
    if "kind" in added:
        assert set(got["kind"]) == {"strategy"}
    for column in set(added) & {"ci_low", "ci_high", "binary_path", "binary_hash", "verdict_reason"}:
        assert set(got[column]) == {""}, column


@pytest.mark.parametrize("campaign", CAMPAIGNS)
def test_old_ledger_exports_the_same_values(old_ledger, tmp_path, campaign):
    with Ledger(old_ledger) as ledger:
        attempts_csv, runs_csv = export_csv(ledger, tmp_path / f"{campaign}.csv", campaign)
        markdown = export_markdown(ledger, tmp_path / f"{campaign}.md", campaign, all_attempts=True)
    for path in (attempts_csv, runs_csv):
        _same_old_columns(path, EXPORTED / path.name)
    assert markdown.read_text() == (EXPORTED / markdown.name).read_text()
    cli = tmp_path / "cli"
    invoke(old_ledger, "export", "--csv", str(cli), "--markdown", str(cli / "t.md"), "--campaign", campaign, "--all")
    assert (cli / "t.md").read_text() == (EXPORTED / f"{campaign}.md").read_text()


def test_old_ledger_pr_table_keeps_the_latest_finished_attempt_per_configuration(old_ledger):
    from workbench.ledger import markdown_table

    with Ledger(old_ledger) as ledger:
        table = markdown_table(ledger, "pre-arch")
    every = (EXPORTED / "pre-arch.md").read_text().strip().splitlines()
    failed = [line for line in every if "| failed —" in line]
    assert len(failed) == 2 and not any(line in table for line in failed)  # the failed pread and engine
    assert all(line in table.splitlines() for line in every if line not in failed)
    assert table.endswith("2 more (2 failed or interrupted) are in the attempt history (`--all` lists every attempt)._")


def test_old_ledger_reports(old_ledger, tmp_path):
    from workbench.ledger.report import write_report

    from workbench.ledger import markdown_table

    with Ledger(old_ledger) as ledger:
        paths = write_report(ledger, "pre-arch", tmp_path / "report")
        table = markdown_table(ledger, "pre-arch")
    assert table in paths.markdown.read_text()
    history = paths.markdown.read_text().split("## Attempt history")[1]
    assert "f5f0fa42" in history and "018b1e1b" in history  # failed attempts stay in the history
    assert "kept" in paths.html.read_text() and paths.attempts_csv.is_file() and paths.runs_csv.is_file()


def test_old_runs_read_back_as_records(old_ledger):
    from workbench.measure.run.stats import summarize

    with Ledger(old_ledger) as ledger:
        attempts = ledger.attempts("pre-arch")
        for a in attempts.to_dict("records"):
            runs = ledger.run_records(a["id"])
            assert len(runs) == a["n"] + a["n_failed"]
            again = summarize(runs, max((r.bytes for r in runs if r.ok), default=0))
            assert (again.n, again.n_failed, again.median_s) == (a["n"], a["n_failed"], ledger.attempt_stats(a["id"]).median_s)
        raw = [json.loads(r) for (r,) in sqlite3.connect(old_ledger).execute("SELECT result FROM runs")]
    assert any("cache_error" in r for r in raw) and any("marker_line" in r for r in raw)
    assert any(r.get("verify") is None and "timings" in r for r in raw)


def test_every_stored_result_reads_back_typed_with_the_same_keys(old_ledger):
    """The typed worker report writes exactly what ledgers have always held in ``runs.result``."""
    from workbench.records import RunRecord, WorkerReport

    with Ledger(old_ledger) as ledger:
        rows = ledger.runs().to_dict("records")
    for row in rows:
        assert WorkerReport.from_json(row["result"]).to_json() == row["result"]
        run = RunRecord.from_json(row)
        assert run.to_json()["result"] == row["result"] and run.position == row["position"]
    reports = [RunRecord.from_json(row).report for row in rows]
    assert sum(r.load is not None for r in reports) == 13 and sum(r.external is not None for r in reports) == 3
    loaded = next(r for r in reports if r.load is not None and r.verify is not None)
    assert loaded.verify.ok and loaded.load.path.readers >= 1 and loaded.timings.window_s > 0
    assert any(r.cache_error and "tmpfs" in r.cache_error for r in reports)
