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


def test_bench_prefetch_shows_what_a_host_way_skipped(tmp_path):
    """Under --miss host every layer runs where its experts lie: the predictor's names are skipped, not
    staged, and the cell rows say so (1.00 of its layers) where the fetch arm skips none (0.00)."""
    out = tmp_path / "p.md"
    oracle = "prefetch=oracle:precision=0.9,recall=0.9"
    assert bench_prefetch.main(["--dir", str(tmp_path), "--size", "16MiB", "--experts", "64", "--cache-mib", "2",
                                "--turns", "3", "--tokens", "2", "--rounds", "1", "--lanes", "2", "--compute", "none",
                                "--arms", f"{oracle} miss=fetch;{oracle} miss=host", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| skipped share | skipped MiB/token |" in text
    table = text.split("| skipped share | skipped MiB/token |", 1)[1].split("\n\n", 1)[0]  # the predictors' rows
    rows = [line.split(" | ") for line in table.splitlines() if f"{oracle} miss=" in line]
    shares = {r[1]: float(r[-2]) for r in rows}
    assert shares == {f"{oracle} miss=fetch": 0.0, f"{oracle} miss=host": 1.0}, rows
