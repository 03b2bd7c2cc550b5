"""Schema version 2: an older ledger is migrated in place when opened; new columns and the turns
table work; merging a version-1 ledger into a version-2 one keeps every row."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from workbench.errors import LedgerError
from workbench.ledger import Ledger
from workbench.ledger.schema import SCHEMA_VERSION, table_columns
from workbench.records import AttemptStats, RunConfig

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ledger-pre-arch.sqlite"


def _version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]


def test_version1_ledger_migrates_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(FIXTURE, path)
    assert _version(path) == 1
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
    with Ledger(path) as ledger:
        frame = ledger.attempts()
        assert len(frame) == before
        assert set(frame["kind"]) == {"strategy"}
        assert frame["ci_low"].isna().all()
    assert _version(path) == SCHEMA_VERSION >= 2
    with sqlite3.connect(path) as conn:
        assert "binary_hash" in table_columns(conn, "attempts")
        assert "unreleased_pages" in table_columns(conn, "turns")


def test_kind_interval_binary_and_turns_round_trip(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as ledger:
        config = RunConfig(file="m.gguf", strategy="session")
        aid = ledger.start_attempt(campaign="c", config=config, cache="warm", kind="session",
                                   binary={"path": "/bin/engine", "hash": "xxh3_128:ab"})
        for turn in range(3):
            ledger.add_turn(aid, {"turn": turn, "tokens": 16, "unreleased_pages": 10 * turn,
                                  "shift_copy_bytes": 0})
        stats = AttemptStats(3, 0, 1.0, 0.9, 1.1, 20.0, 1.0, False)
        ledger.finish_attempt(aid, stats, baseline_id=None, speedup=1.2, verdict="faster",
                              ci=(1.05, 1.31), verdict_reason="interval excludes 1")
        row = ledger.attempt(aid)
        assert (row["kind"], row["binary_hash"]) == ("session", "xxh3_128:ab")
        assert (row["ci_low"], row["ci_high"], row["verdict_reason"]) == (1.05, 1.31, "interval excludes 1")
        turns = ledger.turns(aid[:8])
        assert list(turns["turn"]) == [0, 1, 2]
        assert list(turns["unreleased_pages"]) == [0, 10, 20]
        assert turns["extra"].iloc[0] == {"shift_copy_bytes": 0}
        with pytest.raises(LedgerError, match="unknown attempt kind"):
            ledger.start_attempt(campaign="c", config=config, cache="warm", kind="nope")
        with pytest.raises(LedgerError, match="turn"):
            ledger.add_turn(aid, {"tokens": 1})


def test_merge_version1_source_into_version2(tmp_path: Path) -> None:
    source = tmp_path / "v1.sqlite"
    shutil.copyfile(FIXTURE, source)
    with sqlite3.connect(source) as conn:
        n_attempts = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        n_runs = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    with Ledger(tmp_path / "target.sqlite") as ledger:
        counts = ledger.merge(source)
        assert counts["attempts"] == n_attempts and counts["runs"] == n_runs
        assert counts["turns"] == 0
        assert set(ledger.attempts()["kind"]) == {"strategy"}
    assert _version(source) == 1  # merging reads the source, never migrates it
