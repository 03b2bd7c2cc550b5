"""Issue 19, class 2: a merge adds only new attempts with their own children. Rows built here to attack
the local history — runs, turns and verdicts naming a local attempt, future dates, huge text, a campaign
named ``..``, this machine's ceilings — never change a local row; a killed merge leaves no copy behind."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ledger_helpers import fill_ledger
from workbench.settings.defaults import host_id
from workbench.errors import LedgerError
from workbench.ledger import Ledger


def at(seconds: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


def sql(path: Path, *statements: tuple) -> None:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(*statement)
    conn.commit()
    conn.close()


@pytest.fixture
def local(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "local.sqlite"
    base, _, _ = fill_ledger(path, host="rig-a")
    return path, base


def hostile_copy(tmp_path: Path, local: Path, base: str, when: str) -> Path:
    """A copy of the local ledger (so it passes every schema check) whose rows are aimed at the local
    baseline ``base``: a fake run, a turn, and a verdict history that flips it to reverted, dated ``when``."""
    evil = tmp_path / "evil.sqlite"
    shutil.copyfile(local, evil)
    sql(evil,
        ("INSERT INTO runs (id, attempt_id, position, load_s, wall_s, bytes, created) VALUES"
         " ('fakerun', ?, 99, 0.001, 0.002, 1, ?)", (base, when)),
        ("INSERT INTO turns (id, attempt_id, turn, created) VALUES ('faketurn', ?, 0, ?)", (base, when)),
        ("INSERT INTO verdict_history VALUES ('fakeverdict', ?, 'baseline', 'reverted', 'pwned', ?)", (base, when)),
        ("UPDATE attempts SET verdict = 'reverted', notes = 'pwned' WHERE id = ?", (base,)))
    return evil


def local_view(path: Path, base: str) -> tuple:
    with Ledger(path) as led:
        a = led.attempt(base)
        return a["verdict"], a["notes"], len(led.runs(base)), sorted(led.runs(base)["id"])


def test_rows_aimed_at_a_local_attempt_are_not_taken(tmp_path, local):
    path, base = local
    before = local_view(path, base)
    evil = hostile_copy(tmp_path, path, base, at(-60))
    with Ledger(path) as led:
        counts = led.merge(evil)
    assert (counts["runs"], counts["turns"], counts["verdict_history"]) == (0, 0, 0)
    assert (counts["skipped_runs"], counts["skipped_turns"], counts["skipped_verdict_history"]) == (1, 1, 1)
    assert local_view(path, base) == before  # still the baseline, no fake run, no note


def test_a_local_verdict_is_never_flipped_back_by_a_later_merge(tmp_path, local):
    path, base = local
    evil = hostile_copy(tmp_path, path, base, at(120))  # ahead, but within the clock skew allowed
    with Ledger(path) as led:
        led.merge(evil)
        led.set_verdict(base, "kept", note="checked by hand")
    unrelated = tmp_path / "rig-b.sqlite"
    fill_ledger(unrelated, host="rig-b")
    with Ledger(path) as led:
        assert led.merge(unrelated)["attempts"] == 3
        assert led.attempt(base)["verdict"] == "kept"
        assert led.merge(evil)["verdict_history"] == 0 and led.attempt(base)["verdict"] == "kept"


@pytest.mark.parametrize("statement", [
    "UPDATE attempts SET created = '{future}'",
    "UPDATE runs SET created = '{future}'",
    "UPDATE verdict_history SET at = '{future}'",
    "UPDATE ceilings SET measured_at = '{future}'",
    "UPDATE campaigns SET created = '{future}'",
])
def test_a_time_in_the_future_is_refused(tmp_path, local, statement):
    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    with Ledger(other) as led:
        led.record_ceiling("disk_cold_1t", 1.0, {}, host="rig-b")
        led.set_verdict(led.attempts()["id"][0], "kept")
    sql(other, (statement.format(future=at(3600)),))
    before = path.read_bytes()
    with Ledger(path) as led, pytest.raises(LedgerError, match="is in the future") as info:
        led.merge(other)
    assert "nothing merged" in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize("column, size", [("hypothesis", 30 << 20), ("label", 1 << 20), ("notes", 100 << 10),
                                          ("host", 4096)])
def test_text_beyond_its_bound_is_refused_without_being_loaded(tmp_path, local, column, size):
    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    sql(other, (f"UPDATE attempts SET {column} = ? WHERE rowid = 1", ("x" * size,)))
    tracemalloc.start()
    try:
        with Ledger(path) as led, pytest.raises(LedgerError, match=f"attempts.{column} holds {size:,} bytes"):
            led.merge(other)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak:,} bytes allocated checking a {size:,}-byte value"


@pytest.mark.parametrize("name", ["..", ".", "a/../../b", "x\\y", "bell\x07", "rtl\u202eevil"])
def test_a_campaign_name_that_is_no_name_is_refused(tmp_path, local, name):
    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    sql(other, ("UPDATE campaigns SET name = ?", (name,)))
    with Ledger(path) as led, pytest.raises(LedgerError, match="campaigns.name is not a usable campaign name"):
        led.merge(other)


def test_this_machines_ceilings_are_not_taken(tmp_path, local):
    from workbench.measure.ceilings.bounds import host_ceilings

    path, _ = local
    with Ledger(path) as led:
        led.record_ceiling("disk_cold_1t", 2.0, {"here": True})
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    with Ledger(other) as led:
        led.record_ceiling("disk_cold_1t", 99.0, {"fake": True}, host=host_id())
        led.record_ceiling("disk_cold_1t", 1.5, {}, host="rig-b")
    with Ledger(path) as led:
        counts = led.merge(other)
        assert (counts["ceilings"], counts["skipped_ceilings"]) == (1, 1)
        assert host_ceilings(led)["disk_cold_1t"] == 2.0


def test_attempts_claiming_this_machine_are_not_taken(tmp_path, local):
    from ledger_helpers import record_attempt

    path, base = local
    with Ledger(path) as led:  # this machine's own measurement of a configuration
        mine, _ = record_attempt(led, "mmap", [0.30, 0.31, 0.30], host=host_id())
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    with Ledger(other) as led:  # the same configuration, "measured here", later and much faster
        forged, _ = record_attempt(led, "mmap", [0.01, 0.01, 0.01], host=host_id())
    with Ledger(path) as led:
        counts = led.merge(other)
        assert (counts["attempts"], counts["skipped_attempts"], counts["skipped_runs"]) == (3, 1, 0)
        assert forged not in set(led.attempts()["id"])
        from workbench.ledger import markdown_table

        assert mine[:8] in markdown_table(led, "c") and forged[:8] not in markdown_table(led, "c", all_attempts=True)


def test_the_same_file_under_another_name_is_refused(tmp_path, local):
    path, _ = local
    os.link(path, tmp_path / "hardlink.sqlite")
    with Ledger(path) as led, pytest.raises(LedgerError, match="into itself"):
        led.merge(tmp_path / "hardlink.sqlite")


KILLED = """
import os, signal, sys
from pathlib import Path
import workbench.ledger.merge as merge
from workbench.ledger import Ledger

def die(*args):
    os.kill(os.getpid(), signal.SIGKILL)  # killed with the snapshot taken, mid-merge

merge.check_ledger = die
with Ledger(sys.argv[1]) as led:
    led.merge(sys.argv[2])
"""


def test_a_killed_merge_leaves_no_copy_of_the_other_ledger(tmp_path, local):
    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "SQLITE_TMPDIR": str(scratch)}
    proc = subprocess.run([sys.executable, "-c", KILLED, str(path), str(other)], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    left = [str(p.relative_to(scratch)) for p in scratch.rglob("*")]
    assert left == [], left
    beside = sorted(p.name for p in tmp_path.iterdir())
    assert beside == ["local.sqlite", "local.sqlite-shm", "local.sqlite-wal", "other.sqlite", "tmp"] or \
        beside == ["local.sqlite", "other.sqlite", "tmp"], beside


# -- second adversarial pass (issue 19 "Done when") --------------------------------------------------------

def _yesterday() -> datetime:
    return datetime.now(timezone.utc) - timedelta(days=1)


@pytest.mark.parametrize("form", [
    lambda t: t.strftime("%Y%m%dT%H%M%S"),  # ISO 8601 basic form: a digit sorts after the '-' of every local time
    lambda t: "%04d-W%02d-%d" % t.isocalendar(),  # an ISO week date (Python reads it): 'W' sorts after every month
    lambda t: t.astimezone(timezone(timedelta(hours=14))).isoformat(timespec="microseconds"),  # ahead as text
    lambda t: t.strftime("%Y-%m-%d %H:%M:%S"),  # a space for the T
], ids=["basic", "week", "offset", "space"])
def test_a_time_not_in_the_workbenchs_own_form_is_refused(tmp_path, local, form):
    """Rows are ordered by their time's text; a time Python reads as the past but that sorts after every
    local row would outrank them (the heat map's latest cell, the table's latest attempt) for good."""
    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    when = form(_yesterday())
    sql(other, ("UPDATE attempts SET created = ?", (when,)))
    assert datetime.fromisoformat(when).astimezone(timezone.utc) < datetime.now(timezone.utc)  # the past
    before = path.read_bytes()
    with Ledger(path) as led, pytest.raises(LedgerError, match="as this workbench writes it") as info:
        led.merge(other)
    assert "nothing merged" in str(info.value) and path.read_bytes() == before


def test_a_merged_attempt_in_the_workbenchs_form_sorts_by_its_instant(tmp_path, local):
    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    sql(other, ("UPDATE attempts SET created = ?", (at(-86400),)))  # yesterday, written as the workbench does
    with Ledger(path) as led:
        led.merge(other)
        hosts = list(led.attempts()["host"])
    assert hosts == ["rig-b"] * 3 + ["rig-a"] * 3  # yesterday's come first


def test_this_machines_own_name_is_refused_whatever_workbench_host_says_at_the_merge(tmp_path, local):
    """Merged while ``WORKBENCH_HOST`` names a rig, a ceiling under this machine's own hostname +
    machine-id — what it records under once the variable is unset — would bound every later result here."""
    from workbench.settings.defaults import set_host
    from workbench.measure.ceilings.bounds import host_ceilings

    path, _ = local
    with set_host(None):
        own_name = host_id()
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    with Ledger(other) as led:
        led.record_ceiling("disk_cold_1t", 99.0, {"fake": True}, host=own_name)
    with set_host("rig-a"), Ledger(path) as led:
        counts = led.merge(other)
    assert (counts["ceilings"], counts["skipped_ceilings"]) == (0, 1)
    with set_host(None), Ledger(path) as led:
        assert "disk_cold_1t" not in host_ceilings(led)


@pytest.mark.parametrize("spelling", [str.upper, lambda h: f" {h} "], ids=["case", "spaces"])
def test_this_machines_name_in_another_spelling_is_refused(tmp_path, local, spelling):
    from ledger_helpers import record_attempt

    path, _ = local
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    with Ledger(other) as led:  # shown as this machine in every table: a measurement "made here"
        forged, _ = record_attempt(led, "mmap", [0.01, 0.01, 0.01], host=spelling(host_id()))
        led.record_ceiling("disk_cold_1t", 99.0, {}, host=spelling(host_id()))
    with Ledger(path) as led:
        counts = led.merge(other)
        assert (counts["skipped_attempts"], counts["skipped_ceilings"]) == (1, 1)
        assert forged not in set(led.attempts()["id"])
