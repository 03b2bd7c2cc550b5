"""Schema version 3: runs keep each file's resident fraction before the run (a model is a set of files);
a version-2 ledger gains the column when opened and its runs read back with no per-file facts."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from workbench.ledger import Ledger
from workbench.ledger.schema import ADDED_COLUMNS, SCHEMA_VERSION, table_columns

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ledger-pre-arch.sqlite"


def _as_version2(path: Path) -> None:
    """The version-1 fixture brought to version 2 by hand, as a workbench of version 2 left it."""
    with sqlite3.connect(path) as conn:
        for table, column, decl in ADDED_COLUMNS[2]:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        conn.execute("CREATE TABLE turns (id TEXT PRIMARY KEY, attempt_id TEXT NOT NULL REFERENCES attempts(id), "
                     "turn INTEGER NOT NULL, "
                     "tokens INTEGER, bytes_read INTEGER, hits INTEGER, misses INTEGER, evictions INTEGER, "
                     "minflt INTEGER, majflt INTEGER, accounted_bytes INTEGER, actual_anon_bytes INTEGER, "
                     "unreleased_pages INTEGER, seconds REAL, tokens_per_s REAL, extra TEXT, created TEXT NOT NULL)")
        conn.execute("CREATE INDEX turns_attempt ON turns(attempt_id)")  # as version 2's DDL made them
        conn.execute("UPDATE schema_version SET version = 2")


def test_version2_ledger_gains_per_file_residency_and_reads_its_old_runs(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    shutil.copyfile(FIXTURE, path)
    _as_version2(path)
    with sqlite3.connect(path) as conn:
        assert "resident_files" not in table_columns(conn, "runs")
    with Ledger(path) as ledger:
        attempt_id = ledger.attempts()["id"].iloc[0]
        runs = ledger.run_records(attempt_id)
        assert runs and all(r.resident_files == {} for r in runs)  # older runs: the model's fraction only
        assert ledger.runs(attempt_id)["resident_before"].notna().any()
    with sqlite3.connect(path) as conn:
        assert "resident_files" in table_columns(conn, "runs")
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 3
    with Ledger(tmp_path / "new.sqlite") as fresh:  # and it merges into a new ledger whole
        assert fresh.merge(path)["runs"] > 0
