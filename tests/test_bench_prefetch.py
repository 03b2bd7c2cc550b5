"""benchmarks/bench/bench_prefetch.py end to end at a tiny size on the host: the predictors' table, the
effects with the p99's caveat, the checks."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench"))

import bench_prefetch  # noqa: E402


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def test_bench_prefetch_writes_the_predictors_and_their_effects(tmp_path):
    out = tmp_path / "p.md"
    assert bench_prefetch.main(["--dir", str(tmp_path), "--size", "16MiB", "--experts", "64", "--cache-mib", "2",
                                "--turns", "3", "--tokens", "2", "--rounds", "1", "--lanes", "2", "--compute", "sleep:1",
                                "--arms", "prefetch=none;prefetch=oracle:precision=0.9,recall=0.9", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| cell | arm | round | tok/s | token p50 ms | token p99 ms (n) |" in text
    assert "| prefetch=oracle:precision=0.9,recall=0.9 | token p99 ms |" in text
    assert "each cell's p99: n = 4 tokens; p99 is the slowest token" in text  # turns 2 and 3 of 2 tokens
    assert "n/a: bytes read per token differ" in text or "ok: every cell read the same bytes" in text
