"""A page-cache state that cannot be reached is reported as such, run by run, and never labelled as the
state asked for: a memory file system, pages pinned by another mapping, a read-only mount, and a file
whose residency the kernel hides from us (not its owner).

The runner prepares the cache before every run; these tests give it a stand-in for the worker (the
cache is the runner's part), so each takes milliseconds per run.
"""
from __future__ import annotations

import mmap
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from workbench.io.envinfo import eviction_support
from workbench.ledger import Ledger
from workbench.measure import RunConfig
from workbench.measure.run.runner import measure_with, prepare_cache
from workbench.measure.run.spawn import Outcome


def quick_run(config: RunConfig) -> Outcome:
    """What a worker would say after a 1 ms load (the runner's cache handling is what is tested)."""
    return Outcome(pid=os.getpid(), load_s=1e-3, wall_s=2e-3, bytes=os.path.getsize(config.file))


def write_file(path: Path, size: int = 1 << 20) -> str:
    with open(path, "wb") as fh:
        fh.write(os.urandom(size))
        fh.flush()
        os.fsync(fh.fileno())
    return str(path)


def measure_file(path: str, ledger: Path, cache: str, runs: int, **kw: Any):
    with Ledger(ledger) as led:
        (res,) = measure_with(quick_run, [RunConfig(path, "pread")], runs=runs, cache=cache, ledger=led,
                              lock_dir=ledger.parent / "locks", **kw)
        stored = led.attempt(res.attempt_id)
        stored_runs = led.runs(res.attempt_id).to_dict("records")
    return res, stored, stored_runs


def check_honest(res, stored, stored_runs, asked: str) -> None:
    """The rule: the attempt reads as ``asked`` only when every run reached it, each run says itself."""
    reached = [r.cache_reached for r in res.runs]
    assert [r["cache_reached"] for r in stored_runs] == reached
    if all(reached):
        assert res.cache == stored["cache"] == asked
    else:
        missed = reached.count(False)
        assert res.cache.startswith(f"asis(unreachable: {asked}, {missed}/{len(reached)} runs")
        assert stored["cache"] == res.cache and res.cache_requested == asked
        for run in res.runs:
            assert run.cache_reached or run.report.cache_error  # each missed run says why
    for run in res.runs:
        if asked == "cold" and run.resident_before is not None:
            assert run.cache_reached == (run.resident_before <= 0.02)


def test_a_memory_file_system_is_never_cold(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or eviction_support(shm):
        pytest.skip("needs a memory file system at /dev/shm")
    path = shm / f"wb-cache-test-{os.getpid()}.bin"
    try:
        res, stored, runs = measure_file(write_file(path, 256 << 10), tmp_path / "l.sqlite", "cold", 2)
    finally:
        path.unlink()
    assert [r.cache_reached for r in res.runs] == [False, False]
    assert "tmpfs" in res.runs[0].report.cache_error and "cannot be dropped" in res.runs[0].report.cache_error
    check_honest(res, stored, runs, "cold")


def test_pages_pinned_by_a_mapping_make_cold_unreachable_from_that_run_on(tmp_path):
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages in {tmp_path}: {eviction_support(tmp_path).reason}")
    path = write_file(tmp_path / "m.bin")
    pins: list[Any] = []

    def pin_after_first(done: int, total: int, config: RunConfig, run: Any) -> None:
        if done == 1:  # another process would do this; a mapping in this one pins the same way
            fh = open(path, "rb")
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            sum(m[i] for i in range(0, len(m), mmap.PAGESIZE))  # fault every page into the mapping
            pins.extend([m, fh])

    ledger = tmp_path / "l.sqlite"
    try:
        with Ledger(ledger) as led:  # watch the label while the attempt runs, too
            seen: list[str] = []

            def watch(done: int, total: int, config: RunConfig, run: Any) -> None:
                pin_after_first(done, total, config, run)
                seen.append(led.attempts().iloc[0]["cache"])

            (res,) = measure_with(quick_run, [RunConfig(path, "pread")], runs=3, cache="cold", ledger=led,
                                  lock_dir=tmp_path / "locks", progress=watch)
            stored, runs = led.attempt(res.attempt_id), led.runs(res.attempt_id).to_dict("records")
    finally:
        for obj in reversed(pins):
            obj.close()
    assert [r.cache_reached for r in res.runs] == [True, False, False]
    assert "stay resident after fadvise(DONTNEED)" in res.runs[1].report.cache_error
    check_honest(res, stored, runs, "cold")
    assert seen[0] == "cold" and seen[1].startswith("asis(unreachable: cold")  # relabelled mid-attempt
    from click.testing import CliRunner

    from workbench.cli import main

    shown = CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "show", res.attempt_id]).output
    assert shown.count("cold NOT reached") == 2  # each run's row says it, not just "cold"


def test_a_read_only_mount_reports_what_it_really_reached(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root here")
    source, view = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    view.mkdir()
    write_file(source / "m.bin")
    proc = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(view)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount --bind -o ro not permitted here: {proc.stderr.strip()}")
    try:
        with pytest.raises(OSError):
            open(view / "m.bin", "r+b")  # it is read-only indeed
        for asked in ("cold", "warm", "cold"):
            res, stored, runs = measure_file(str(view / "m.bin"), tmp_path / f"{asked}.sqlite", asked, 2)
            check_honest(res, stored, runs, asked)
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_residency_the_kernel_hides_is_unreachable_not_cold(tmp_path):
    """mincore shows a file's page-cache residency only to its owner or a writer (Linux >= 5.2); for
    anyone else it reads all zeros, which would pass for cold."""
    if os.geteuid() != 0:
        got = prepare_cache("/usr/bin/env", "cold")  # root's, read-only for us
        outcome = (got.resident, got.reached, got.error)
    else:
        import shutil
        import tempfile

        home = Path(tempfile.mkdtemp(prefix="wb-hidden-"))  # tmp_path's parents are closed to others
        try:
            home.chmod(0o755)
            outcome = prepare_cache_as_nobody(write_file(home / "m.bin"))
        finally:
            shutil.rmtree(home)
    resident, reached, error = outcome
    assert reached is False and "mincore hides page-cache residency" in error and "cold" in error


def prepare_cache_as_nobody(path: str) -> tuple:
    """prepare_cache(path, "cold") in a forked child that dropped to uid/gid 65534 (nobody)."""
    import json

    os.chmod(path, 0o644)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: everything it needs is imported already; it only reports back
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            got = prepare_cache(path, "cold")
            answer = [got.resident, got.reached, got.error]
        except BaseException as exc:  # noqa: BLE001 - say it to the parent, whatever it is
            answer = [None, None, f"child failed: {exc!r}"]
        try:
            os.write(write, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(text))
