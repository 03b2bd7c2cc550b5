"""benchmarks/bench/bench_sizes.py (issue 25) end to end on the host backend at a tiny size: every row verified,
its fixed parts and streaming part, the walls of the run, and a config that cannot run said and left out."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench"


@pytest.fixture()
def bench(tmp_path, isolated_cache, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("bench_sizes")
    finally:
        sys.path.remove(str(BENCH))


def test_a_tiny_run_writes_each_rows_split_and_the_walls(bench, tmp_path, capsys):
    out = tmp_path / "out"
    assert bench.main(["--device", "host", "--dir", str(tmp_path / "m"), "--sizes", "2MiB", "--runs", "1",
                       "--spec", "ring direct=off", "--spec", "pread", "--spec", "peer-instanttensor direct=0",
                       "--out", str(out)]) == 0
    doc = json.loads((out / "bench.json").read_text())
    (model,) = doc["models"]
    assert set(model["walls"]) == {"page_cache_read_file_%dt" % len(__import__("os").sched_getaffinity(0)),
                                   "h2d_host_pinned_dma"} and all(v > 0 for v in model["walls"].values())
    rows = {r["spec"]: r for r in model["rows"]}
    assert set(rows) == {"ring direct=off", "pread"}  # InstantTensor loads to CUDA only: left out, and said
    assert "peer-instanttensor direct=0: left out" in capsys.readouterr().err
    ring = rows["ring direct=off"]
    assert ring["verified"] == ring["n"] == 1 and ring["parts_ms"]["index"] > 0
    assert set(ring["parts_ms"]) == {"index", "probe", "alloc", "staging", "start", "release"}
    assert abs(ring["fixed_ms"] + ring["streaming_ms"] - ring["median_ms"]) < 1e-6
    assert ring["counters"]["read_us"] > 0 and "fixed + streaming ms" in (out / "bench.md").read_text()
