"""Issue 23 §4, the H200 balloon run of 2026-12-03: a balloon squeezed the session's own libraries (2,088–4,778
major faults a cell, compute_s 3.5–30 s against 0.06), so both arms measured the method. Under a balloon the
worker now locks its own resident file pages after turn 0 (only those it mapped and are resident, never the
model's), says what it locked, and a cell whose own faults still run above a few a turn is ``own-files``,
which fails the A/B's checks."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import mmap
import os

import pytest
from click.testing import CliRunner

from workbench.errors import ParamError
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import SessionReport, summarize
from workbench.io import own_pages
from workbench.io.own_pages import PAGE, file_mappings, lock_range, pin_own_file_pages, resident_runs
from workbench.io.pagecache import evict_file_pages
from workbench.measure.session import cgroups
from workbench.measure.session import pressure
from workbench.measure.session.balloon import measure_working_set
from workbench.measure.session.pressure import OWN_FAULTS_PER_TURN, MemoryLimit, MemoryPressure
from workbench.measure.session.runner import OWN_FILES_KIND, _outcome, outcome_kind

MiB = 1 << 20


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def _mapped(tmp_path, touched=(0, 1, 2, 3, 10, 11, 40), pages=64):
    """A file of ``pages`` pages, evicted, mapped read-only with readahead off, ``touched`` pages read
    through the mapping; pages 20–23 brought into the page cache by pread only (cached, never mapped)."""
    path = tmp_path / "mapped.bin"
    path.write_bytes(os.urandom(pages * PAGE))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    evict_file_pages(path)
    m = mmap.mmap(fd, pages * PAGE, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)  # a fault reads its own page only
    for page in touched:
        _ = m[page * PAGE]
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    os.pread(fd, 4 * PAGE, 20 * PAGE)
    where = next(x for x in file_mappings() if x.path == str(path))
    return path, fd, m, where


def _locked_kib(start: int, end: int) -> int:
    """smaps' Locked: over ``[start, end)`` (mlock of part of a mapping splits it into several)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as fh:
        for line in fh:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = start <= lo and hi <= end
            elif inside and line.startswith("Locked:"):
                total += int(line.split()[1])
    return total


def test_only_the_resident_pages_this_process_touched_are_locked(tmp_path):
    path, fd, m, where = _mapped(tmp_path)
    try:
        page = lambda runs: [((a - where.start) // PAGE, n // PAGE) for a, n in runs]  # noqa: E731
        assert page(resident_runs(where.start, where.end - where.start, mapped_only=False)) == \
            [(0, 4), (10, 2), (20, 4), (40, 1)]  # the page cache holds 20–23 too …
        runs = resident_runs(where.start, where.end - where.start)
        assert page(runs) == [(0, 4), (10, 2), (40, 1)]  # … but this process never mapped them
        assert all(lock_range(a, n) == 0 for a, n in runs)
        assert _locked_kib(where.start, where.end) * 1024 == 7 * PAGE
        after = resident_runs(where.start, where.end - where.start, mapped_only=False)
        assert page(after) == [(0, 4), (10, 2), (20, 4), (40, 1)]  # locking read nothing in
        assert all(x.path != str(path) for x in file_mappings(exclude=[str(path)]))  # the model's files: never
    finally:
        m.close()
        os.close(fd)


def test_pinning_skips_the_model_and_a_refused_mlock_is_one_line(tmp_path, monkeypatch):
    path, fd, m, where = _mapped(tmp_path)
    try:
        report = pin_own_file_pages(exclude=[str(path)], budget_bytes=4 * MiB)
        assert _locked_kib(where.start, where.end) == 0 and 0 < report.locked_bytes <= 4 * MiB
        assert report.vmlck_bytes >= report.locked_bytes and report.seconds >= 0
        assert report.resident_bytes > 4 * MiB and "the balloon left room for 4.0 MiB" in report.note
        monkeypatch.setattr(own_pages, "lock_range", lambda *_a: errno.ENOMEM)
        monkeypatch.setattr(own_pages, "_can_lock_any", lambda: False)
        refused = pin_own_file_pages(exclude=[str(path)])
        assert refused.locked_bytes == 0 and "\n" not in refused.text()
        assert "mlock refused after 0.0 MiB" in refused.note and "RLIMIT_MEMLOCK" in refused.note
    finally:
        for x in file_mappings():  # this test process keeps nothing locked
            ctypes.CDLL(None).munlock(ctypes.c_void_p(x.start), ctypes.c_size_t(x.end - x.start))
        m.close()
        os.close(fd)


def test_a_session_under_a_balloon_locks_its_own_file_pages_after_turn_0(synth_model, tmp_path, monkeypatch):
    from workbench.expert.session import SessionConfig
    from workbench.measure.session.runner import measure_session

    def refused(*_a, **_k):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(cgroups, "make_v2", refused)
    monkeypatch.setattr(pressure, "_make_v1", refused)
    index = synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=64)
    with contextlib.ExitStack() as stack:
        for attempt in range(3):  # a shared machine's MemAvailable moves: size it again right before
            limit = (pressure.meminfo("MemAvailable") - measure_working_set().bytes - 32 * MiB) / MiB
            try:
                held = stack.enter_context(MemoryPressure(limit, "auto"))  # no cgroup: the balloon, as on the H200
                break
            except ParamError:
                if attempt == 2:
                    raise
        config = SessionConfig(turns=3, tokens=1, cache_mib=1, experts_per_token=4, reader="pread",
                               memory_limit_mib=limit)
        result = measure_session(index.path, config, ledger=tmp_path / "l.sqlite", cache="cold", pressure=held)
    assert result.error is None and result.memory_method == "balloon", result.error
    facts = result.report.summary.facts
    assert facts.pinned_file_bytes > 0 and facts.pinned_vmlck_bytes >= facts.pinned_file_bytes
    assert 0 <= facts.pinned_s < 5 and facts.pinned_resident_bytes >= facts.pinned_file_bytes
    assert "the worker locks its own resident file pages after turn 0" in result.memory_limit
    # the lock is what this test is about; whether the machine reclaimed something meanwhile (a busy
    # machine: 'reclaim', the machine's refaults) is not, but the cell must not have hit its own files
    assert "the worker locked" in result.memory_outcome and outcome_kind(result.memory_outcome) != "own-files"
    assert json.loads(json.dumps(result.report.to_json()))["summary"]["facts"]["pinned_file_bytes"] > 0


def _balloon() -> MemoryPressure:
    p = MemoryPressure(64, "balloon")
    p.limit = MemoryLimit("balloon", 64 * MiB, detail="balloon: test", worker_file_bytes=8 * MiB)
    return p


def _turns(majflt: list[int]) -> list[TurnRecord]:
    return [TurnRecord(turn=i, tokens=4, bytes_read=1000, hits=1, misses=1, evictions=0, minflt=0, majflt=n,
                       accounted_bytes=0, actual_anon_bytes=0, unreleased_pages=0, seconds=1.0, tokens_per_s=4.0,
                       read_busy_s=0.1, landed_bytes=100) for i, n in enumerate(majflt)]


def test_own_faults_after_turn_0_under_a_balloon_make_an_own_files_outcome():
    p = _balloon()
    h200 = _outcome(p, 0, _turns([24, 0, 700, 2256]))  # the H200's last cell, cut after 4 turns
    assert outcome_kind(h200) == OWN_FILES_KIND and "2,956 major faults in the 3 turns after turn 0" in h200
    assert "measures the method, not the session" in h200
    assert outcome_kind(_outcome(p, 0, _turns([11, 0, 0]))) == "none"  # the unlimited probe's faults: warm-up only
    at = OWN_FAULTS_PER_TURN
    assert outcome_kind(_outcome(p, 0, _turns([30, at, at, at]))) != OWN_FILES_KIND
    assert outcome_kind(_outcome(p, 0, _turns([30, at + 1, at + 1, at + 1]))) == OWN_FILES_KIND
    assert outcome_kind(_outcome(p, -9, _turns([30, 900, 900]))) == "OOM"  # the OOM killer says more
    pinned = _outcome(p, 0, _turns([30, 0, 0]), "the worker locked 20.0 MiB of its own resident file pages")
    assert pinned.endswith("; the worker locked 20.0 MiB of its own resident file pages")
    cgroup = MemoryPressure(64, "cgroup")
    cgroup.limit = MemoryLimit("cgroup-v1", 64 * MiB, path="/nonexistent", version=1)
    cgroup.oom_kills = lambda: 0  # type: ignore[method-assign]
    assert outcome_kind(_outcome(cgroup, 0, _turns([30, 900, 900]))) != OWN_FILES_KIND  # confined: never


def _facts(pinned: int = -1) -> SessionFacts:
    return SessionFacts("inplace", "", "ON", "pread", "", "on", "lru", 1, 1, 1, "synthetic", "", "host", False,
                        pinned_file_bytes=pinned)


def test_an_ab_with_an_own_files_cell_fails_its_checks_and_exits_1(synth_model, tmp_path, monkeypatch):
    import workbench.measure.session.runner as session_mod
    from workbench.cli import main
    from workbench.records import RunConfig

    faults = iter([[24, 0, 0, 0], [24, 0, 700, 2256], [24, 0, 1, 0], [24, 0, 0, 2]])

    def fake(file, config, *, device="host", cache="asis", label="", ledger=None, campaign="default", **_kw):
        turns = _turns(next(faults))
        outcome = _outcome(_balloon(), 0, turns)
        attempt = ledger.start_attempt(campaign=campaign, config=RunConfig(file, "session", {}, device), cache=cache,
                                       label=label, kind="session")
        from workbench.measure.session.record import session_stats

        ledger.finish_attempt(attempt, session_stats(turns), baseline_id=None, speedup=None, verdict="baseline")
        report = SessionReport(tuple(turns), summarize(turns, _facts(20 * MiB), verified_slices=4))
        return session_mod.SessionResult(attempt, file, device, cache, None, report, "baseline", "", None,
                                         memory=f"balloon: test — {outcome}", memory_method="balloon",
                                         memory_outcome=outcome, memory_limit="balloon: test")

    monkeypatch.setattr(session_mod, "measure_session", fake)
    monkeypatch.setattr(pressure, "held_for_cells", lambda _mib: None)  # no real balloon in a unit test
    index = synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=64)
    args = ["session", index.path, "--turns", "4", "--tokens", "4", "--ab", "boundary-release=on", "--ab",
            "boundary-release=off", "--rounds", "2", "--memory-limit", "64", "--ledger", str(tmp_path / "l.sqlite")]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    kinds = [line.split(":")[0].strip() for line in result.stdout.splitlines() if line.startswith("    memory ")]
    assert kinds == ["memory none", "memory own-files", "memory none", "memory none"], result.stdout
    failed = [line for line in result.stdout.splitlines() if line.startswith("check FAILED")]
    assert len(failed) == 1 and "1 of 4 cells" in failed[0] and "measure the method, not the session" in failed[0]
