"""``ledger merge`` of a ledger from elsewhere: anything this workbench would not have written is
refused in one line naming the file, nothing is merged, and the target's bytes do not change."""
from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.errors import LedgerError
from workbench.ledger import Ledger
from workbench.ledger.schema import SCHEMA_VERSION


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def target(tmp_path) -> Path:
    path = tmp_path / "target.sqlite"
    fill_ledger(path, host="rig-a")
    return path


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "other" / "source.sqlite"
    path.parent.mkdir()
    fill_ledger(path, host="rig-b")
    with Ledger(path) as led:
        led.record_ceiling("disk_cold_1t", 1.8, {"threads": 1}, host="rig-b")
        led.set_verdict(led.attempts()["id"][1], "kept")
    return path


def refused(target: Path, source: Path, match: str) -> str:
    """Merge must fail with one LedgerError line naming ``source``, leaving ``target`` byte for byte."""
    before, files = digest(target), sorted(os.listdir(target.parent))
    with Ledger(target) as led:
        n_attempts = len(led.attempts())
        with pytest.raises(LedgerError) as info:
            led.merge(source)
        assert len(led.attempts()) == n_attempts  # and the ledger is still usable
    text = str(info.value)
    assert text.startswith(str(source)) and "\n" not in text and "nothing merged" in text, text
    assert match in text, text
    assert digest(target) == before and sorted(os.listdir(target.parent)) == files
    return text


def edit(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return path


def test_valid_source_merges_and_leaves_no_files_beside_it(target, source):
    beside = sorted(os.listdir(source.parent))
    with Ledger(target) as led:
        counts = led.merge(source)
    assert counts["attempts"] == 3 and counts["runs"] == 13 and counts["ceilings"] == 1
    assert sorted(os.listdir(source.parent)) == beside  # no -wal/-shm left next to someone else's file


def test_source_still_being_written_is_read_with_its_wal(target, source):
    writer = Ledger(source)  # holds the WAL open: committed rows live in source-wal, not yet in the file
    try:
        from ledger_helpers import record_attempt

        fresh, _ = record_attempt(writer, "lanes", [0.3, 0.31], host="rig-b")
        assert Path(f"{source}-wal").exists()
        with Ledger(target) as led:
            led.merge(source)
            assert led.attempt(fresh)["strategy"] == "lanes"
    finally:
        writer.close()


def test_not_sqlite(target, tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"id,host\n1,rig-b\n" * 500)
    refused(target, junk, "not a readable SQLite ledger")


def test_empty_file(target, tmp_path):
    (tmp_path / "empty.sqlite").write_bytes(b"")
    refused(target, tmp_path / "empty.sqlite", "no schema_version table")


def test_corrupt_pages(target, source):
    data = bytearray(source.read_bytes())
    page = 4096
    for p in range(1, len(data) // page):  # every page's header, not the file header: SQLite still opens it
        data[p * page:p * page + 12] = b"\xa5" * 12
    source.write_bytes(bytes(data))
    refused(target, source, "corrupt")


def test_truncated_file(target, source):
    data = source.read_bytes()
    source.write_bytes(data[:len(data) // 2])
    refused(target, source, "source.sqlite")


@pytest.mark.parametrize("statements, match", [
    ([f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}"], f"schema version [{SCHEMA_VERSION + 1}]"),
    (["UPDATE schema_version SET version = 0"], "schema version [0]"),
    (["INSERT INTO schema_version VALUES (2)"], f"schema version [{SCHEMA_VERSION}, 2]"),
    (["UPDATE schema_version SET version = 1"], "has unknown ['binary_hash'"),  # v1 never had them
    (["DROP TABLE turns"], "table 'turns' is missing"),
    (["DROP TABLE verdict_history"], "table 'verdict_history' is missing"),
    (["ALTER TABLE runs DROP COLUMN phases"], "lacks ['phases']"),
    (["ALTER TABLE runs ADD COLUMN gpu_temp REAL"], "has unknown ['gpu_temp']"),
])
def test_wrong_schema(target, source, statements, match):
    refused(target, edit(source, *statements), match)


@pytest.mark.parametrize("statement, match", [
    ("UPDATE runs SET load_s = -0.5 WHERE position = 1", "runs.load_s is outside [0, inf] (value -0.5"),
    ("UPDATE attempts SET median_s = 9e999", "attempts.median_s is outside"),  # +inf
    ("UPDATE attempts SET min_s = 'NaN'", "attempts.min_s is str, not a number"),
    ("UPDATE runs SET wall_s = 'fast'", "runs.wall_s is str"),
    ("UPDATE attempts SET verdict = 'awesome' WHERE strategy = 'mmap'", "attempts.verdict is not one of"),
    ("UPDATE verdict_history SET new = 'meh'", "verdict_history.new is not one of"),
    ("UPDATE runs SET attempt_id = 'feedface' WHERE position = 0", "runs.attempt_id names a missing attempt"),
    ("UPDATE attempts SET campaign_id = 'nope'", "attempts.campaign_id names a missing campaign"),
    ("UPDATE attempts SET baseline_id = 'nope' WHERE baseline_id IS NOT NULL", "names a missing attempt"),
    ("UPDATE attempts SET params = '{threads: 4'", "attempts.params is not a JSON dict"),
    ("UPDATE runs SET phases = '[1, 2]'", "runs.phases is not a JSON dict"),
    ("UPDATE ceilings SET detail = x'00ff'", "ceilings.detail is not a JSON dict"),
    ("UPDATE runs SET resident_before = 1.5", "runs.resident_before is outside [0, 1]"),
    ("""UPDATE runs SET resident_files = '{"model-00001-of-00002.safetensors": 3}'""",
     "runs.resident_files holds 'model-00001-of-00002.safetensors', not a fraction in [0, 1]"),
    ("UPDATE runs SET resident_files = '[0.5]'", "runs.resident_files is not a JSON dict"),
    ("UPDATE runs SET cache_state = 'lukewarm'", "runs.cache_state is not one of cold, warm, asis"),
    ("UPDATE runs SET verified = 7", "runs.verified is outside [0, 1]"),
    ("UPDATE runs SET bytes = 1.5", "runs.bytes is float, not an integer"),
    ("UPDATE attempts SET created = 'yesterday'", "attempts.created is not a UTC time as this workbench writes it"),
    ("UPDATE campaigns SET name = ''", "campaigns.name is not a usable campaign name: a campaign needs a non-empty name"),
    ("UPDATE attempts SET speedup = 0 WHERE speedup IS NOT NULL", "attempts.speedup is outside"),
    ("UPDATE ceilings SET gbps = -3", "ceilings.gbps is outside"),
])
def test_absurd_values(target, source, statement, match):
    refused(target, edit(source, statement), match)


def test_duplicate_ids_in_a_table_without_its_key(target, source):
    """A table made without its key is not a ledger's table: refused by its schema (issue 35), before the
    ids are counted (a table with its key cannot hold an id twice)."""
    edit(source, "CREATE TABLE c2 AS SELECT * FROM campaigns", "DROP TABLE campaigns",
         "ALTER TABLE c2 RENAME TO campaigns", "INSERT INTO campaigns SELECT id, name || '2', description, created"
         " FROM campaigns")
    refused(target, source, "schema: table 'campaigns'")


def test_campaign_id_that_means_another_campaign_here(target, source):
    with Ledger(target) as led:
        ours = led.campaigns()["id"][0]
    refused(target, edit(source, f"UPDATE campaigns SET id = '{ours}', name = 'other-name'",
                         f"UPDATE attempts SET campaign_id = '{ours}'"), "there but 'c' here")


def test_many_problems_are_counted_in_one_line(target, source):
    text = refused(target, edit(source, "UPDATE runs SET load_s = -1"), "more problem(s)")
    assert "runs.load_s" in text


def test_cli_merge_of_a_bad_ledger_is_one_line_exit_2(target, source):
    edit(source, "UPDATE runs SET load_s = -1")
    before = digest(target)
    out = CliRunner().invoke(main, ["ledger", "--ledger", str(target), "merge", str(source)])
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    assert "runs.load_s" in out.output and "nothing merged" in out.output
    assert digest(target) == before
