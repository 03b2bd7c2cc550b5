"""Issue 19, class 8: ``ledger list|show|export`` read and change nothing — on a read-only mount, a full
disk, behind another writer's lock — and say in one line when a file is no workbench ledger or needs
``workbench ledger upgrade``."""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.errors import LedgerError
from workbench.ledger import Ledger

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def state(directory: Path) -> dict[str, str]:
    """Every file in ``directory`` and its bytes' hash: a reader must leave all of it as it was. SQLite's
    own read-only opening of a WAL ledger may add the shared-memory index (``-shm``) and an empty ``-wal``
    beside it, as ``sqlite3 -readonly`` does; those are not the ledger's bytes."""
    out = {}
    for p in sorted(directory.iterdir()):
        if p.name.endswith("-shm") or (p.name.endswith("-wal") and p.stat().st_size == 0):
            continue
        out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def read_everything(ledger: Path, attempt: str) -> None:
    """list, show and both exports (to stdout) succeed and name the attempt."""
    listed = cli("ledger", "--ledger", str(ledger), "list")
    assert listed.exit_code == 0 and attempt[:8] in listed.output, listed.output
    shown = cli("ledger", "--ledger", str(ledger), "show", attempt[:8])
    assert shown.exit_code == 0 and attempt in shown.output, shown.output
    for option in ("--markdown", "--csv"):
        exported = cli("ledger", "--ledger", str(ledger), "export", option, "-")
        assert exported.exit_code == 0 and attempt[:8] in exported.output, exported.output


def one_line(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "\n" not in text and text.startswith("workbench: error:"), text
    assert all(n in text for n in needles), text
    return text


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "home" / "l.sqlite"
    path.parent.mkdir()
    base, _, _ = fill_ledger(path)
    return path, base


def mount_or_skip(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} not permitted here: {proc.stderr.strip()}")


def test_reading_on_a_read_only_mount(ledger):
    path, base = ledger
    before = state(path.parent)
    mount_or_skip("--bind", "-o", "ro", str(path.parent), str(path.parent))
    try:
        read_everything(path, base)
    finally:
        subprocess.run(["umount", str(path.parent)], check=False)
    assert state(path.parent) == before


def test_reading_on_a_full_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mount_or_skip("-t", "tmpfs", "-o", "size=1m", "wb-test-full-read", str(disk))
    try:
        path = disk / "l.sqlite"
        base, _, _ = fill_ledger(path)
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError, match="No space left"):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        before = state(disk)
        read_everything(path, base)
        assert state(disk) == before
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_reading_behind_another_writers_lock(ledger):
    path, base = ledger
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # held for the whole read, far past the busy timeout below
    holder.execute("UPDATE campaigns SET description = 'being edited'")
    try:
        env = {"WORKBENCH_LEDGER_BUSY_TIMEOUT": "0.5"}
        listed = cli("ledger", "--ledger", str(path), "list", env=env)
        assert listed.exit_code == 0 and base[:8] in listed.output, listed.output
        shown = cli("ledger", "--ledger", str(path), "show", base[:8], env=env)
        assert shown.exit_code == 0, shown.output
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_foreign_database_is_one_line_and_stays_as_it_was(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = state(tmp_path)
    for args in (["list"], ["show", "abcdef12"], ["export", "--markdown", "-"]):
        one_line(cli("ledger", "--ledger", str(path), *args), "not a workbench ledger", "users")
    # commands that record refuse it too, instead of adding their tables to someone else's database
    one_line(cli("ledger", "--ledger", str(path), "verdict", "abcdef12", "kept"), "not a workbench ledger")
    assert state(tmp_path) == before
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_an_empty_file_is_one_line_and_stays_empty(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.touch()
    one_line(cli("ledger", "--ledger", str(path), "list"), "not a workbench ledger", "empty file")
    assert state(tmp_path) == {"empty.sqlite": hashlib.sha256(b"").hexdigest()}


def test_a_file_that_is_not_sqlite_is_one_line(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("just some notes, long enough to be read as a database header " * 20)
    before = state(tmp_path)
    one_line(cli("ledger", "--ledger", str(path), "list"), "not an SQLite database")
    assert state(tmp_path) == before


def test_an_older_ledger_is_read_only_after_ledger_upgrade(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURES / "ledger-pre-arch.sqlite", path)
    before = state(tmp_path)
    for args in (["list"], ["export", "--csv", "-"]):
        one_line(cli("ledger", "--ledger", str(path), *args), "schema version 1", "workbench ledger upgrade")
    assert state(tmp_path) == before  # not upgraded in place by a reader
    upgraded = cli("ledger", "--ledger", str(path), "upgrade")
    from workbench.ledger.schema import SCHEMA_VERSION

    assert upgraded.exit_code == 0 and f"schema version 1 → {SCHEMA_VERSION}" in upgraded.output, upgraded.output
    assert cli("ledger", "--ledger", str(path), "list").exit_code == 0
    again = cli("ledger", "--ledger", str(path), "upgrade")
    assert again.exit_code == 0 and f"already at schema version {SCHEMA_VERSION}; nothing changed" in again.output


@pytest.mark.parametrize("version", ["'two'", "2.5", "X'02'", "'v2'"])
def test_a_schema_version_that_is_not_a_whole_number_is_one_line(ledger, version):
    path, _ = ledger
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE schema_version SET version = {version}")
    conn.commit()
    conn.close()
    for args in (["list"], ["upgrade"], ["verdict", "abcdef12", "kept"]):
        one_line(cli("ledger", "--ledger", str(path), *args), "schema version", "not one whole number")
    with pytest.raises(LedgerError, match="not one whole number"):
        Ledger(path)


def test_two_schema_version_rows_are_one_line(ledger):
    path, _ = ledger
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.commit()
    conn.close()
    one_line(cli("ledger", "--ledger", str(path), "list"), "not one whole number")


def test_a_dead_runners_attempt_reads_interrupted_without_being_written(ledger):
    from workbench.records import RunConfig

    path, _ = ledger
    with Ledger(path) as led:
        dead = led.start_attempt(campaign="c", config=RunConfig("/m", "mmap"), cache="cold")
    conn = sqlite3.connect(path)  # its runner: a process of this host and boot that no longer exists
    env = conn.execute("SELECT environment FROM attempts WHERE id = ?", (dead,)).fetchone()[0]
    conn.execute("UPDATE attempts SET environment = ? WHERE id = ?",
                 (env.replace(f'"pid": {os.getpid()}', '"pid": 999999999'), dead))
    conn.commit()
    conn.close()
    before = state(path.parent)
    with Ledger(path, readonly=True) as led:
        a = led.attempt(dead)
        assert (a["verdict"], a["verdict_reason"], a["n"]) == ("failed", "interrupted", 0)
        assert led.attempts().set_index("id").loc[dead, "verdict"] == "failed"
    listed = cli("ledger", "--ledger", str(path), "list")
    assert any(line.startswith(dead[:8]) and line.endswith("failed") for line in listed.output.splitlines())
    assert state(path.parent) == before
    with Ledger(path) as led:  # a writer reaps it for good, the same way
        assert led.reap_abandoned() == [dead] and led.attempt(dead)["verdict_reason"] == "interrupted"
    assert sqlite3.connect(path).execute("SELECT verdict FROM attempts WHERE id = ?", (dead,)).fetchone()[0] == "failed"
