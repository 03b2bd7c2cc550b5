"""Issue 35 §2: a hostile ledger cannot make a merge expensive, and a merge creates nothing beside it.

The schema of a ledger from elsewhere is checked against every version's before SQLite evaluates
anything in it; what runs over it runs under SQLite's limits, a deadline and a heap cap; a ``-wal``
without its ``-shm`` is read from a private copy (``benchmarks/hardening/hostile_merge.py`` measures the same)."""
from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ledger_helpers import fill_ledger
from workbench.errors import LedgerError
from workbench.ledger import Ledger
from workbench.ledger import foreign


@pytest.fixture(scope="module")
def hostile(bench_module):
    return bench_module("hostile_merge")


@pytest.fixture
def local(tmp_path: Path) -> Path:
    path = tmp_path / "local.sqlite"
    fill_ledger(path, host="rig-a")
    return path


def other_ledger(tmp_path: Path, name: str = "other.sqlite") -> Path:
    path = tmp_path / name
    fill_ledger(path, host="rig-b")
    return path


def _limit_memory(nbytes: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))


def test_the_issues_planted_expression_indexes_are_refused_before_any_is_evaluated(tmp_path, local, hostile):
    """Five indexes on hex(zeroblob(450000000)): 6.6 GB and 13.4 s before; here the merge runs in a child
    limited to 1.5 GiB of address space (the old merge dies of it) and must say 'schema' in one line."""
    evil = other_ledger(tmp_path, "evil.sqlite")
    hostile.plant_expression_indexes(evil, 450_000_000, 5)
    assert evil.stat().st_size < 200_000
    before = local.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "ledger", "--ledger", str(local), "merge", str(evil)],
                          capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory(3 << 29))
    said = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, said
    assert len(said.splitlines()) == 1 and "schema: table 'evil'" in said and "nothing merged" in said, said
    assert local.read_bytes() == before


def _rewrite_schema(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema = ON")
    for statement in statements:
        conn.execute(statement)
    conn.execute("PRAGMA writable_schema = OFF")
    conn.close()


PLANTS = {  # each: what is planted, made by SQLite's own statements or written into sqlite_master
    "view": ["CREATE VIEW costly AS SELECT hex(zeroblob(4500000))"],
    "trigger": ["CREATE TRIGGER t AFTER INSERT ON campaigns BEGIN SELECT hex(zeroblob(4500000)); END"],
    "index on a column": ["CREATE INDEX runs_by_pid ON runs(pid)"],
    "expression index on a ledger table": ["CREATE INDEX a ON attempts(hex(zeroblob(1)))", "PRAGMA writable_schema = ON",
                                           "UPDATE sqlite_master SET sql = replace(sql, '(1)', '(4500000)') WHERE name = 'a'"],
    "partial index": ["CREATE INDEX p ON runs(id) WHERE length(hex(zeroblob(1))) > 0"],
    "generated column": ["PRAGMA writable_schema = ON",
                         "UPDATE sqlite_master SET sql = replace(sql, 'resident_files TEXT)', "
                         "'resident_files TEXT, g AS (hex(zeroblob(4500000))))') WHERE name = 'runs'"],
    "check constraint": ["PRAGMA writable_schema = ON",
                         "UPDATE sqlite_master SET sql = replace(sql, 'created TEXT NOT NULL)', "
                         "'created TEXT NOT NULL CHECK (length(hex(zeroblob(4500000))) > 0))') WHERE name = 'campaigns'"],
    "renamed index": ["DROP INDEX runs_attempt", "CREATE INDEX runs_attempt ON runs(pid)"],
    "statistics": ["ANALYZE"],
}


@pytest.mark.parametrize("kind", PLANTS)
def test_every_schema_object_not_of_a_ledger_is_refused_by_name(tmp_path, local, kind):
    other = other_ledger(tmp_path)
    conn = sqlite3.connect(other, isolation_level=None)
    for statement in PLANTS[kind]:
        conn.execute(statement)
    conn.execute("PRAGMA writable_schema = OFF")
    conn.close()
    before = local.read_bytes()
    with Ledger(local) as led, pytest.raises(LedgerError, match="schema: ") as info:
        led.merge(other)
    assert "\n" not in str(info.value) and "nothing merged" in str(info.value)
    assert local.read_bytes() == before


def test_ledgers_of_every_version_and_their_migrations_still_merge(tmp_path, local):
    """The known objects are made from the DDL: the pre-arch fixture (version 1, as written then), and a
    ledger of each version brought up by opening (the ALTERs rewrite the stored CREATE text)."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "ledger-pre-arch.sqlite"
    old = tmp_path / "old.sqlite"
    old.write_bytes(fixture.read_bytes())
    with Ledger(local) as led:
        assert led.merge(old)["attempts"] > 0
    with Ledger(old):  # opening migrates it to today's version in place
        pass
    with Ledger(tmp_path / "fresh.sqlite") as led:
        assert led.merge(old)["attempts"] > 0


def test_a_wal_without_its_shm_is_merged_whole_and_nothing_is_made_beside_it(tmp_path, local, hostile, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    other = tmp_path / "copied" / "other.sqlite"
    other.parent.mkdir()
    hostile.wal_without_shm(other)
    files = {p.name: p.read_bytes() for p in other.parent.iterdir()}
    assert sorted(files) == ["other.sqlite", "other.sqlite-wal"]
    with Ledger(local) as led:
        assert led.merge(other)["attempts"] == 1
    assert {p.name: p.read_bytes() for p in other.parent.iterdir()} == files  # nothing made, nothing changed
    assert list(scratch.iterdir()) == []  # the private copy is gone


def test_the_rows_only_a_wal_holds_are_merged(tmp_path, hostile):
    other = tmp_path / "copied" / "other.sqlite"
    other.parent.mkdir()
    hostile.wal_without_shm(other)
    with Ledger(tmp_path / "empty.sqlite") as led:
        led.merge(other)
        assert led._conn.execute("SELECT description FROM campaigns").fetchall() == [("in the wal",)]


def test_a_merge_past_its_deadline_stops_in_one_line(tmp_path, local, monkeypatch):
    other = other_ledger(tmp_path)
    conn = sqlite3.connect(other)
    columns = ", ".join(r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "id")
    for _ in range(6):  # 13 runs → 832: statements long enough for the progress handler to be called
        conn.execute(f"INSERT INTO runs (id, {columns}) SELECT lower(hex(randomblob(16))), {columns} FROM runs")
    conn.commit()
    conn.close()
    monkeypatch.setattr(foreign, "DEADLINE_BASE_S", -1.0)
    before = local.read_bytes()
    with Ledger(local) as led, pytest.raises(LedgerError, match="took longer than") as info:
        led.merge(other)
    assert "nothing merged" in str(info.value)
    assert local.read_bytes() == before


def test_sqlites_heap_is_capped_during_a_merge_and_the_cap_put_back(tmp_path, local, monkeypatch):
    if not foreign.heap_cap_reaches_sqlite():
        pytest.skip("the SQLite library Python uses is not reachable through ctypes here")
    probe = sqlite3.connect(":memory:")
    monkeypatch.setattr(foreign, "HEAP_CAP", 64 << 10)  # far less than a merge needs
    with Ledger(local) as led, pytest.raises(LedgerError, match="needed more than"):
        led.merge(other_ledger(tmp_path))
    assert probe.execute("PRAGMA hard_heap_limit").fetchone()[0] == 0


def test_a_value_past_sqlites_limit_is_refused_in_one_line(tmp_path, local, monkeypatch):
    monkeypatch.setattr(foreign, "_LIMITS", {**foreign._LIMITS, sqlite3.SQLITE_LIMIT_LENGTH: 1 << 20})
    other = other_ledger(tmp_path)
    conn = sqlite3.connect(other)
    conn.execute("UPDATE attempts SET hypothesis = ? WHERE rowid = 1", ("x" * (2 << 20),))
    conn.commit()
    conn.close()
    with Ledger(local) as led, pytest.raises(LedgerError, match="holds a value larger than"):
        led.merge(other)


def test_the_private_copy_of_a_killed_merge_is_removed_by_the_next(tmp_path):
    from workbench.output.owned import owned_name

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    parts = owned_name(foreign.COPY_PREFIX, ".sqlite")[len(foreign.COPY_PREFIX):].split("-")
    parts[1] = str(int(parts[1]) + 1)  # this process's name with another start time: a dead owner's
    left = scratch / (foreign.COPY_PREFIX + "-".join(parts))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{left}{suffix}").write_bytes(b"x")
    other = tmp_path / "other.sqlite"
    other.write_bytes(b"not a ledger")
    Path(f"{other}-wal").write_bytes(b"")
    env = {**os.environ, "TMPDIR": str(scratch)}
    code = ("import sys; from pathlib import Path; from workbench.ledger.foreign import _private_copy\n"
            "with _private_copy(Path(sys.argv[1])): pass")
    subprocess.run([sys.executable, "-c", code, str(other)], env=env, check=True, timeout=60)
    assert list(scratch.iterdir()) == []
