"""benchmarks/bench/bench_threads.py against the code it measures: its GIL calibration drives the ring's own
reader loop (strategies/ring_readers.py) over a real index, and a tiny run writes its table. The
calibration once imported a reader class that had moved, and the script failed only when run."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench"


@pytest.fixture()
def bench(tmp_path, isolated_cache, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("bench_threads")
    finally:
        sys.path.remove(str(BENCH))


def test_the_gil_calibration_runs_the_rings_reader_loop_and_leaves_no_file(bench, tmp_path):
    us = bench.python_us_per_window(50)
    assert 0 < us < 50_000
    assert not list(tmp_path.glob(".wb-gil-*"))


def test_a_tiny_run_writes_its_table(bench, tmp_path, capsys):
    assert bench.main(["--dir", str(tmp_path / "m"), "--size", "4MiB", "--runs", "1", "--threads", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "| readers |" in out and "\n| 1 |" in out and "\n| 2 |" in out
